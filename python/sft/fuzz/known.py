"""Open bugs the fuzzer found, each recognised by its outcome (kind and detail), by what the
generator noted in the program (`Program.features`), by the plan and by the target, so that a
campaign (and test/python/test_fuzz.py) counts them apart from new failures. Each has a strict
xfail with a minimal reproducer naming where it lies (IREE, mostly): in test_fuzz.py, or in
test_vulkan.py for the SPIR-V ones; fix one and its xfail starts passing: delete both."""

from __future__ import annotations

from ..space.options import AGGRESSIVE_FUSION, DATA_TILING

FUSION_DT = {AGGRESSIVE_FUSION, DATA_TILING}

KNOWN = {
    "iree-data-tiling-segfault": lambda prog, plan, out, target: out.kind == "plan-compile" and
        DATA_TILING in plan.flags and "iree-compile crashed (killed by SIGSEGV)" in out.detail,
    "reduce-body-ignores-inputs": lambda prog, plan, out, target: out.kind in ("wrong", "reject") and
        "reduce-body-ignores-inputs" in prog.features,
    "init-is-operand": lambda prog, plan, out, target: out.kind in ("reject", "plan-compile") and
        "init-is-operand" in prog.features and "write affecting operations on global" in out.detail,
    "iree-fusion-with-data-tiling": lambda prog, plan, out, target: out.kind == "plan-compile" and
        FUSION_DT <= set(plan.flags) and "write affecting operations on global" in out.detail,
    # on Vulkan targets only
    # IREE's SPIR-V code for a contraction or a reduction (fused with its producer) whose
    # summed loop comes before a parallel one, on lavapipe: wrong elements (IREE alone, no plan)
    "iree-spirv-summed-loop-first": lambda prog, plan, out, target: out.kind == "wrong" and
        target.driver == "vulkan" and "summed-loop-not-innermost" in prog.features,
    # IREE's SPIR-V code for a contraction writing its result in another order than its loops,
    # fused with the contraction feeding it, on lavapipe: elements left unwritten (IREE alone)
    "iree-spirv-transposed-result": lambda prog, plan, out, target: out.kind == "wrong" and
        target.driver == "vulkan" and "result-transposed" in prog.features,
    # IREE's SPIR-V on a matmul fused with a consumer reading a constant index of a 3-d tensor
    "iree-spirv-unresolved-materialization": lambda prog, plan, out, target: out.kind in
        ("reject", "plan-compile") and target.driver == "vulkan" and
        "failed to legalize unresolved source materialization" in out.detail,
    # IREE's SPIR-V lowers f64 math (exp, log, tanh, ...) to GLSL.std.450, which takes 16/32-bit
    # floats only: iree-compile refuses the f64 program
    "iree-spirv-f64-math": lambda prog, plan, out, target: out.kind in ("reject", "plan-compile") and
        target.driver == "vulkan" and "'spirv.GL." in out.detail and "but got 'f64'" in out.detail,
}


def known_bug(program, plan, outcome, target) -> str | None:
    """The name of the open bug a failed outcome on `target` is, or None (a new failure)."""
    return next((name for name, seen in KNOWN.items() if seen(program, plan, outcome, target)), None)
