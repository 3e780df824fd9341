"""sft-bench dispatches: where a model's time goes, kernel by kernel, under IREE's own compile
and under sft's plan (`search="model"`): every executable of each program compiled alone and
timed on one thread (`backend.dispatches`), matched by IREE's kernel names (root op, extents,
types). It finds what a whole-program time hides: a kernel sft's lowering made slower than
IREE's (a convolution that lost its named op ran 37x slower), and where a training step spends
its time (95% in five matmuls for the MLP).

Models are those of `sft-bench speed` (inference) and `sft-bench train` (training steps, torch
and JAX).
"""

from __future__ import annotations

from collections import defaultdict

from tqdm import tqdm


def programs(name: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{"iree": (the front end's linalg, ()), "sft": (sft's planned program, its flags)} for a
    suite model or training step."""
    from ..models import BENCH_SUITE, LARGE_SUITE
    from .bench_train import JAX_TRAIN_SUITE, TORCH_TRAIN_SUITE

    if name in JAX_TRAIN_SUITE:
        from ..api import compile as sft_compile
        from ..importers.jax import import_jax
        from .bench_train_jax import step_of

        step, args = step_of(JAX_TRAIN_SUITE[name])
        text = import_jax(step, args, (0, 1))[0]
        compiled = sft_compile(step, args, search="model", keep_ir=True, donate_argnums=(0, 1))
    elif name in TORCH_TRAIN_SUITE:
        from ..importers.torch_train import trace_train_step
        from ..train import compile_train_step

        case = TORCH_TRAIN_SUITE[name]
        model = case.build()
        text = trace_train_step(model, case.loss, case.optimizer(model.parameters()),
                                case.batch()).linalg
        compiled = compile_train_step(model, case.loss, case.optimizer(model.parameters()),
                                      case.batch(), search="model", keep_ir=True)
    else:
        from ..api import compile as sft_compile
        from ..program import import_model

        case = {**BENCH_SUITE, **LARGE_SUITE}[name]
        model, inputs = case.build(), case.inputs()
        text = import_model(model, inputs)[0]
        compiled = sft_compile(model, inputs, search="model", keep_ir=True)
    return {"iree": (text, ()), "sft": (compiled.stages.planned, compiled.plan.flags)}


def dispatch_row(name: str, rounds: int = 3) -> dict:
    """Per kernel name: seconds summed over its executables under each variant (None where one
    failed), and the totals."""
    from ..backend.dispatches import time_dispatches
    from ..targets import get_target

    variants = programs(name)
    kernels: dict = defaultdict(dict)
    with tqdm(desc=f"{name} dispatches", unit="kernel", leave=False) as bar:
        for variant, (text, flags) in variants.items():
            for d in time_dispatches(text, get_target("host"), flags, rounds, progress=bar.update):
                got = kernels[d.kernel].get(variant, 0.0)
                kernels[d.kernel][variant] = None if got is None or d.seconds is None else got + d.seconds
    totals = {v: sum(k.get(v) or 0.0 for k in kernels.values()) for v in variants}
    return {"model": name, "kernels": dict(kernels), "total_s": totals}


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:9.1f}"


def print_row(row: dict, top: int = 12) -> None:
    kernels = row["kernels"]
    order = sorted(kernels, key=lambda k: -max(v or 0.0 for v in kernels[k].values()))
    print(f"{row['model']}: us per call, kernel by kernel (one thread), IREE's own compile / "
          f"sft's plan")
    for kernel in order[:top]:
        iree, ours = kernels[kernel].get("iree"), kernels[kernel].get("sft")
        ratio = f"{iree / ours:6.2f}x" if iree and ours else "      -"
        print(f"  {kernel[:56]:<56} {_us(iree)} {_us(ours)} {ratio}")
    total, rest = row["total_s"], len(order) - top
    label = "total" + (f" ({rest} more kernels)" if rest > 0 else "")
    ratio = f"{total['iree'] / total['sft']:6.2f}x" if total["sft"] else ""
    print(f"  {label:<56} {_us(total['iree'])} {_us(total['sft'])} {ratio}")


def dispatches(models: list[str], rounds: int) -> dict:
    rows = []
    for name in models:
        rows.append(dispatch_row(name, rounds))
        print_row(rows[-1])
    return {"rows": rows}
