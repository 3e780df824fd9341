"""sft-hold-packed: take a held weight packed in panels, read by IREE's 4-D matmul (mmt4d).

A weight held [K, N] (`passes.hold_transposed`) is still read across rows: each step over k
of a register block loads its n columns from a row N floats away from the last. Held instead
as [N/n0, K, n0, 1] (panels of n0 columns, each panel's k rows one after the other), the
block streams its panel in order, and IREE's codegen of `linalg.mmt4d` at an m0 x n0 block
reaches the vendor library's rate: on the 2-core Intel Xeon VM (AVX-512, one thread), a
128x256 by 256x1024 product took 400 us at 8x32 (MKL: 402; IREE's plain matmul with the
weight held [K, N]: 575-595), and the 256-1024-256 MLP at batch 32 251 us against 402
(docs/results.md, "Weights held packed").

The rewrite is on the lowered linalg (in IREE's context, after the kernel configs: a packed
matmul's config is dropped, and IREE configures the mmt4d, whose inner dims are the block):
each `linalg.matmul` whose B is a packed argument (and each `linalg.batch_matmul` whose B is its
broadcast over the batch: the batch's rows taken as rows) becomes the pack of A into [M/m0, K, m0, 1]
(rows padded with zeros where m0 does not divide M), `linalg.mmt4d`, and the unpack of its
[M/m0, N/n0, m0, n0] result; the accumulator is packed the same way (IREE folds a packed fill).
`packed` lists (argument, m0, n0): each argument must be a [K, N] matrix (held, so transposes
no longer read it) read only as B of plain matmuls, with n0 dividing N. IREE's micro-kernels
take only their own block sizes and run any other at a fallback's rate (8x32: 28 ms against
0.4), so a packed plan is compiled with them off (`Plan.iree_flags`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from ..decisions.kind import IREE, DecisionKind
from ..errors import IllegalPlan
from ..ir import dialects_of, iree_ir, parse
from ..space.options import DATA_TILING
from .common import items_option

UKERNELS_OFF = "--iree-llvmcpu-enable-ukernels=none"


def _shape(value) -> tuple[int, ...] | None:
    """The static shape of an f32 ranked tensor value, else None."""
    match = re.fullmatch(r"tensor<((?:\d+x)+)f32>", str(value.type))
    return tuple(int(d) for d in match[1].split("x")[:-1]) if match else None


def _matrix(value) -> tuple[int, int] | None:
    shape = _shape(value)
    return shape if shape is not None and len(shape) == 2 else None


# the default maps of the named ops read (C[m, n] += A[m, k] B[k, n], batched over b), as
# the ops print them
MAPS = {"linalg.matmul": "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> "
                         "(d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]",
        "linalg.batch_matmul": "[affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, "
                               "d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]"}


def _reads_b(use, name: str) -> bool:
    """`use` is operand B of a `name` op with its default maps, at the function's top level."""
    op = use.owner
    return op.name == name and use.operand_number == 1 and op.parent.name == "func.func" and (
        "indexing_maps" not in op.attributes or str(op.attributes["indexing_maps"]) == MAPS[name])


def _matmul_readers(func, position: int) -> list | None:
    """The matmuls that read argument `position` of `func` (a matrix) as B, when those are its
    only readers: plain `linalg.matmul`s, and `linalg.batch_matmul`s of its broadcast over
    their batch (as torch's attention projects a [seq, batch, dim] input), all f32 on static
    shapes; else None."""
    args = func.regions[0].blocks[0].arguments
    if not 0 <= position < len(args) or _matrix(args[position]) is None:
        return None
    readers = []
    for use in args[position].uses:
        op = use.owner
        if _reads_b(use, "linalg.matmul"):
            readers.append(op)
        elif (op.name == "linalg.broadcast" and op.parent.name == "func.func"
              and str(op.attributes["dimensions"]) == "array<i64: 0>"
              and all(_reads_b(u, "linalg.batch_matmul") for u in op.results[0].uses)):
            readers += [u.owner for u in op.results[0].uses]
        else:
            return None
    if not all(_shape(v) for r in readers for v in r.operands):
        return None
    return readers or None


def _entry(module):
    return next(op for op in module.body.operations if op.operation.name == "func.func")


def _flops(matmul) -> int:
    a, _, acc = (_shape(v) for v in matmul.operands)
    return 2 * math.prod(acc) * a[-1]


def packable(module, candidates: tuple[int, ...], n0: int, min_flops: float = 0) -> tuple[int, ...]:
    """Those of the argument positions `candidates` of `module`'s entry (lowered linalg) that
    sft-hold-packed can take in panels of `n0` columns, whose matmuls do `min_flops` or more."""
    with module.context:
        func = _entry(module)
        args = func.regions[0].blocks[0].arguments
        readers = {a: _matmul_readers(func, a) for a in candidates}
        return tuple(a for a, found in readers.items() if found is not None
                     and _matrix(args[a])[1] % n0 == 0 and sum(map(_flops, found)) >= min_flops)


def _reshaped(value, shape, reassociation: str, ir):
    """`value` collapsed or expanded (by the shapes' ranks) to `shape` along `reassociation`."""
    expand = len(shape) > len(_shape(value))
    attributes = {"reassociation": ir.Attribute.parse(reassociation)}
    if expand:
        attributes["static_output_shape"] = ir.Attribute.parse(f"array<i64: {', '.join(map(str, shape))}>")
    return ir.Operation.create("tensor.expand_shape" if expand else "tensor.collapse_shape",
                               results=[ir.RankedTensorType.get(shape, ir.F32Type.get())],
                               operands=[value], attributes=attributes).result


def packed_reads(lowered: str, candidates: tuple[int, ...], n0: int) -> dict[int, tuple[int, ...]]:
    """Argument -> the op ids (`sft.op`, as sft-lower stamps them) of the matmuls reading it,
    for those of `candidates` sft-hold-packed can take in panels of `n0` columns, read from
    `lowered` (sft-lower's output, ids still on)."""
    from .lower import OP_ID

    module = parse(iree_ir.Context(), lowered)
    with module.context:
        func = _entry(module)
        found = {}
        for a in packable(module, candidates, n0):
            readers = _matmul_readers(func, a)
            if all(OP_ID in r.attributes for r in readers):
                found[a] = tuple(iree_ir.IntegerAttr(r.attributes[OP_ID]).value for r in readers)
        return found


def _rewrite(matmul, panels, m0: int, n0: int, linalg, tensor, ir) -> None:
    """`matmul` (B: the argument `panels`, packed; a batch matmul's batch taken as rows) as
    pack, mmt4d and unpack."""
    a, _, acc = matmul.operands
    batch = _shape(acc)[:-2]
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(matmul), matmul.location:
        if batch:  # [b, m, k] rows as [b * m, k]: the batch's A and C are contiguous rows
            a = _reshaped(a, [batch[0] * _shape(a)[1], _shape(a)[2]], "[[0, 1], [2]]", ir)
            acc = _reshaped(acc, [batch[0] * _shape(acc)[1], _shape(acc)[2]], "[[0, 1], [2]]", ir)
        (m, k), (_, n) = _matrix(a), _matrix(acc)
        m1 = -(-m // m0)
        zero = ir.Operation.create("arith.constant", results=[f32],
                                   attributes={"value": ir.FloatAttr.get(f32, 0.0)}).result
        pad = dict(padding_value=zero) if m % m0 else {}
        a_packed = linalg.pack(a, tensor.empty([m1, k, m0, 1], f32), [0, 1], [m0, 1], **pad)
        acc_packed = linalg.pack(acc, tensor.empty([m1, n // n0, m0, n0], f32), [0, 1], [m0, n0], **pad)
        product = linalg.mmt4d(a_packed, panels, outs=[acc_packed])
        result = linalg.unpack(product, tensor.empty([m, n], f32), [0, 1], [m0, n0])
        if batch:
            result = _reshaped(result, [batch[0], m // batch[0], n], "[[0, 1], [2]]", ir)
    matmul.results[0].replace_all_uses_with(result)
    matmul.erase()


def hold_packed(module, packed: tuple[tuple[int, int, int], ...]) -> None:
    """Rewrite `module`'s entry to take each (argument, m0, n0) of `packed` in panels (see the
    module docstring); an IllegalPlan where one cannot be."""
    if not packed:
        return
    ir, linalg, tensor = dialects_of(module)
    with module.context, ir.Location.unknown():
        func = _entry(module)
        block = func.regions[0].blocks[0]
        for position, m0, n0 in packed:
            readers = _matmul_readers(func, position)
            if readers is None or m0 < 1 or n0 < 1 or _matrix(block.arguments[position])[1] % n0:
                raise IllegalPlan(f"plan holds argument {position} packed in {m0}x{n0} blocks: it "
                                  "is not a matrix (held: plan.held) read only as B of f32 "
                                  "matmuls (or of batch matmuls, broadcast), in whole panels of "
                                  "that many columns")
            panels = block.arguments[position]
            broadcasts = [u.owner for u in panels.uses if u.owner.name == "linalg.broadcast"]
            k, n = _matrix(panels)
            panels.set_type(ir.RankedTensorType.get([n // n0, k, n0, 1], ir.F32Type.get()))
            for matmul in readers:
                _rewrite(matmul, panels, m0, n0, linalg, tensor, ir)
            for broadcast in broadcasts:  # read by nothing now
                broadcast.erase()
        func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], func_type.results))


def packed_array(array: np.ndarray, n0: int) -> np.ndarray:
    """A [K, N] held weight as the packed module takes it: [N/n0, K, n0, 1]."""
    k, n = array.shape
    return np.ascontiguousarray(np.asarray(array).reshape(k, n // n0, n0).transpose(1, 0, 2)[..., None])


def unpacked_array(array: np.ndarray) -> np.ndarray:
    """`packed_array`'s inverse: [N/n0, K, n0, 1] -> [K, N]."""
    n1, k, n0, _ = array.shape
    return np.ascontiguousarray(np.asarray(array)[..., 0].transpose(1, 0, 2).reshape(k, n1 * n0))


def block_of(desc) -> tuple[int, int]:
    """(m0, n0): the register block a packed matmul runs at on a CPU of `desc`: 8 rows of as
    many vectors as keep half the vector registers accumulating (AVX-512's 32 registers: 8x32,
    16 accumulators; AVX2's 16: 8x8)."""
    return 8, desc.simd_f32 * max(desc.vector_registers // 16, 1)


# A weight whose matmuls do less than this is not packed in a twin: the packs and unpacks
# cost more than a small product gains, and each twin is one more program verify times.
TWIN_MIN_FLOPS = 1e6


def packed_twin(plan, target, lowered):
    """`plan` with the arguments it holds also packed at the target's block (`block_of`), those
    that `lowered()` (the program `plan` lowers to) reads as B of matmuls only and that do
    `TWIN_MIN_FLOPS` or more; None where
    it packs none, packs operands itself (data tiling), compiles the import, or the target
    does not pack weights (`Target.pack_weights`)."""
    if (not target.pack_weights or not plan.held or plan.packed or plan.as_imported
            or DATA_TILING in plan.flags):
        return None
    m0, n0 = block_of(target.desc)
    found = packable(parse(iree_ir.Context(), lowered()), plan.held, n0, TWIN_MIN_FLOPS)
    return replace(plan, packed=tuple((a, m0, n0) for a in found)) if found else None


def triples(value, what: str) -> tuple[tuple[int, int, int], ...]:
    if not isinstance(value, list) or not all(
            isinstance(t, list) and len(t) == 3 and all(type(x) is int for x in t) for t in value):
        raise TypeError(f"{what} must be a list of [argument, m0, n0] triples, not {value!r:.60}")
    return tuple(tuple(t) for t in value)


@dataclass(frozen=True)
class HoldPackedPass:
    """Take held weights packed in panels, read by mmt4d: {args=A:M0:N0,...}."""

    packed: tuple[tuple[int, int, int], ...] = ()
    name = "sft-hold-packed"

    @classmethod
    def from_options(cls, text: str) -> "HoldPackedPass":
        """`args=A:M0:N0,...` (sft-opt -p 'sft-hold-packed{args=0:8:32}')."""
        return cls(items_option(cls.name, text, "args", "A:M0:N0",
                                lambda a, m0, n0: (int(a), int(m0), int(n0))))

    def __call__(self, module) -> None:
        hold_packed(module, self.packed)


KIND = DecisionKind(
    field="packed", type="tuple[tuple[int, int, int], ...]", default=(),
    doc="held arguments (argument, m0, n0) taken packed in panels of n0 columns and multiplied "
        "by mmt4d at an m0 x n0 block (each must be held too)", parse=triples, stage=IREE,
    make_pass=HoldPackedPass,
    describe=lambda packed: f"parameters {[p for p, _, _ in packed]} held packed "
                            f"({packed[0][1]}x{packed[0][2]} blocks)")
