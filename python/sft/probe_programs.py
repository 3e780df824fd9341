"""The programs `sft-calibrate` and `sft doctor` time, as MLIR text: chains of dispatches,
copies and transposes, independent FMAs, matmuls. Text only; the timing is theirs."""

from __future__ import annotations


def chain_program(regions: int, n: int) -> str:
    """`regions` dependent elementwise ops on a vector of n f32, each forced into a dispatch of
    its own by a flow.dispatch.region (IREE keeps such regions)."""
    ty = f"tensor<{n}xf32>"
    lines = [f"func.func @main(%x0: {ty}) -> {ty} {{"]
    for i in range(regions):
        lines += [
            f"  %x{i + 1} = flow.dispatch.region -> ({ty}) {{",
            f"    %e = tensor.empty() : {ty}",
            f"    %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],"
            f" iterator_types = [\"parallel\"]}} ins(%x{i} : {ty}) outs(%e : {ty}) {{",
            "    ^bb0(%a: f32, %b: f32):",
            "      %s = arith.addf %a, %a : f32",
            "      linalg.yield %s : f32",
            f"    }} -> {ty}",
            f"    flow.return %r : {ty}",
            "  }"]
    lines += [f"  return %x{regions} : {ty}", "}"]
    return "\n".join(lines) + "\n"


def relayout_program(rows: int, cols: int, transpose: bool) -> str:
    """x + x of a rows x cols f32 tensor, written transposed or in order: a relayout dispatch
    and the copy it is priced against."""
    out = f"tensor<{cols}x{rows}xf32>" if transpose else f"tensor<{rows}x{cols}xf32>"
    result = "(d1, d0)" if transpose else "(d0, d1)"
    return "\n".join([
        f"func.func @main(%x: tensor<{rows}x{cols}xf32>) -> {out} {{",
        f"  %e = tensor.empty() : {out}",
        "  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
        f"affine_map<(d0, d1) -> {result}>], iterator_types = [\"parallel\", \"parallel\"]}}"
        f" ins(%x : tensor<{rows}x{cols}xf32>) outs(%e : {out}) {{",
        "  ^bb0(%a: f32, %o: f32):",
        "    %s = arith.addf %a, %a : f32",
        "    linalg.yield %s : f32",
        f"  }} -> {out}",
        f"  return %y : {out}", "}"]) + "\n"


def fma_program(chains: int, steps: int, n: int) -> str:
    """An elementwise op on n f32 whose body is `chains` independent chains of `steps` dependent
    FMAs, summed: the vectorised loop keeps chains x (vectors per tile) FMAs in flight, so that
    the FMA units' issue rate, not their latency, bounds it (2 * chains * steps FLOP an element)."""
    ty = f"tensor<{n}xf32>"
    body = [f"      %c{c}_0 = arith.constant {c + 1}.0 : f32" for c in range(chains)]
    for i in range(steps):  # step by step, the chains interleaved; x is the program's: no folding
        body += [f"      %c{c}_{i + 1} = math.fma %c{c}_{i}, %x, %x : f32" for c in range(chains)]
    ends = [f"%c{c}_{steps}" for c in range(chains)]
    total = ends[0]
    for i, end in enumerate(ends[1:]):
        body.append(f"      %s{i} = arith.addf {total}, {end} : f32")
        total = f"%s{i}"
    return "\n".join([
        f"func.func @main(%in: {ty}) -> {ty} {{",
        f"  %e = tensor.empty() : {ty}",
        "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],"
        f" iterator_types = [\"parallel\"]}} ins(%in : {ty}) outs(%e : {ty}) {{",
        "    ^bb0(%x: f32, %o: f32):", *body, f"      linalg.yield {total} : f32",
        f"  }} -> {ty}", f"  return %r : {ty}", "}"]) + "\n"


def _matmul(name: str, a: str, b: str, rows: int, inner: int, cols: int) -> list[str]:
    """%name = %a [rows, inner] @ %b [inner, cols], into a zero-filled result (`%zero` in scope)."""
    ty = f"tensor<{rows}x{cols}xf32>"
    return [f"  %{name}e = tensor.empty() : {ty}",
            f"  %{name}i = linalg.fill ins(%zero : f32) outs(%{name}e : {ty}) -> {ty}",
            f"  %{name} = linalg.matmul ins(%{a}, %{b} : tensor<{rows}x{inner}xf32>, "
            f"tensor<{inner}x{cols}xf32>) outs(%{name}i : {ty}) -> {ty}"]


def held_matmul_program(m: int, k: int, n: int) -> str:
    """A [M, K] by B [K, N]: a matmul whose weight is held [K, N] (`passes.hold_transposed`)."""
    return "\n".join([
        f"func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{",
        "  %zero = arith.constant 0.0 : f32", *_matmul("r", "a", "b", m, k, n),
        f"  return %r : tensor<{m}x{n}xf32>", "}"]) + "\n"


def probe_program(m: int, d: int, h: int) -> str:
    """relu(x[M, D] @ w1[D, H]) @ w2[H, D], its weights held [K, N]: two dispatches (IREE fuses
    the relu into the first matmul's)."""
    hidden = f"tensor<{m}x{h}xf32>"
    return "\n".join([
        f"func.func @main(%x: tensor<{m}x{d}xf32>, %w1: tensor<{d}x{h}xf32>, "
        f"%w2: tensor<{h}x{d}xf32>) -> tensor<{m}x{d}xf32> {{",
        "  %zero = arith.constant 0.0 : f32",
        *_matmul("h", "x", "w1", m, d, h),
        f"  %re = tensor.empty() : {hidden}",
        "  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
        "affine_map<(d0, d1) -> (d0, d1)>], iterator_types = [\"parallel\", \"parallel\"]}"
        f" ins(%h : {hidden}) outs(%re : {hidden}) {{",
        "  ^bb0(%a: f32, %o: f32):",
        "    %v = arith.maximumf %a, %zero : f32",
        "    linalg.yield %v : f32",
        f"  }} -> {hidden}",
        *_matmul("y", "r", "w2", m, h, d),
        f"  return %y : tensor<{m}x{d}xf32>", "}"]) + "\n"


# The optimizer updates a weight gradient's dispatch fuses (`update_program`): the state tensors
# each reads and writes beside the weight, and its body (`%gv` the gradient, `%wv` the weight,
# `%s0`, `%s1` the state; yields the new weight and state). AdamW's constants are PyTorch's
# defaults, its bias corrections at step 10.
UPDATE_BODIES = {
    "sgd": (("mom",), [
        "    %a = arith.mulf %s0, %mu : f32",
        "    %m2 = arith.addf %gv, %a : f32",
        "    %b = arith.mulf %m2, %lr : f32",
        "    %w2 = arith.addf %wv, %b : f32",
        "    linalg.yield %w2, %m2 : f32, f32"]),
    "adamw": (("m", "v"), [
        "    %b1 = arith.constant 0.9 : f32",
        "    %b1c = arith.constant 0.1 : f32",
        "    %b2 = arith.constant 0.999 : f32",
        "    %b2c = arith.constant 0.001 : f32",
        "    %c1 = arith.constant 0.6513216 : f32",
        "    %c2 = arith.constant 0.0099551 : f32",
        "    %eps = arith.constant 1.0e-8 : f32",
        "    %wd = arith.constant 0.99999 : f32",
        "    %alr = arith.constant 0.001 : f32",
        "    %ma = arith.mulf %s0, %b1 : f32",
        "    %mb = arith.mulf %gv, %b1c : f32",
        "    %m2 = arith.addf %ma, %mb : f32",
        "    %gg = arith.mulf %gv, %gv : f32",
        "    %va = arith.mulf %s1, %b2 : f32",
        "    %vb = arith.mulf %gg, %b2c : f32",
        "    %v2 = arith.addf %va, %vb : f32",
        "    %mh = arith.divf %m2, %c1 : f32",
        "    %vh = arith.divf %v2, %c2 : f32",
        "    %sq = math.sqrt %vh : f32",
        "    %de = arith.addf %sq, %eps : f32",
        "    %st = arith.divf %mh, %de : f32",
        "    %sl = arith.mulf %st, %alr : f32",
        "    %wdk = arith.mulf %wv, %wd : f32",
        "    %w2 = arith.subf %wdk, %sl : f32",
        "    linalg.yield %w2, %m2, %v2 : f32, f32, f32"]),
}


def update_program(m: int, n: int, k: int, transposed: bool, optimizer: str = "sgd") -> str:
    """A weight gradient g = x[M, K] @ dy[K, N] and the update of a weight and its optimizer
    state (`UPDATE_BODIES`: "sgd", SGD with momentum; "adamw") that IREE fuses into the
    gradient's dispatch. All are passed [N, M], as a JAX step holds a weight against the
    gradient its matmul computes: `transposed`, the update walks them and their new values
    across their rows; else it reads them reshaped to [M, N] (a view: no data moves), in order."""
    states, body = UPDATE_BODIES[optimizer]
    passed, held = f"tensor<{n}x{m}xf32>", f"tensor<{m}x{n}xf32>"
    ty, at = (passed, "(d1, d0)") if transposed else (held, "(d0, d1)")
    names = ["w", *states]
    views = []
    if not transposed:
        for name in names:
            views += [f"  %{name}f = tensor.collapse_shape %{name}0 [[0, 1]] : {passed} into tensor<{m * n}xf32>",
                      f"  %{name}1 = tensor.expand_shape %{name}f [[0, 1]] output_shape [{m}, {n}] : "
                      f"tensor<{m * n}xf32> into {held}"]
    read = [f"%{name}{0 if transposed else 1}" for name in names]
    maps = ", ".join(f"affine_map<(d0, d1) -> {x}>" for x in ("(d0, d1)", *[at] * (2 * len(names))))
    results = ", ".join([ty] * len(names))
    block = ", ".join(["%gv: f32", "%wv: f32", *[f"%s{i}: f32" for i in range(len(states))],
                       *[f"%o{i}: f32" for i in range(len(names))]])
    return "\n".join([
        f"func.func @main(%x: tensor<{m}x{k}xf32>, %dy: tensor<{k}x{n}xf32>, "
        + ", ".join(f"%{name}0: {passed}" for name in names) + f") -> ({results}) {{",
        "  %zero = arith.constant 0.0 : f32",
        "  %mu = arith.constant 0.9 : f32",
        "  %lr = arith.constant -0.01 : f32",
        *_matmul("g", "x", "dy", m, k, n),
        *views,
        f"  %e = tensor.empty() : {ty}",
        f"  %r:{len(names)} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [\"parallel\", "
        f"\"parallel\"]}} ins(%g, {', '.join(read)} : {held}, {', '.join([ty] * len(names))}) "
        f"outs({', '.join(['%e'] * len(names))} : {results}) {{",
        f"  ^bb0({block}):",
        *body,
        f"  }} -> ({results})",
        f"  return {', '.join(f'%r#{i}' for i in range(len(names)))} : {results}", "}"]) + "\n"
