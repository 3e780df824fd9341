"""Open bugs the fuzzer found, each recognised by its outcome (kind and detail), by what the
generator noted in the program (`Program.features`) and by the plan, so that a campaign (and
test/python/test_fuzz.py) counts them apart from new failures. Each has a strict xfail with a
minimal reproducer in test_fuzz.py naming where it lies (IREE, mostly); fix one and its xfail
starts passing: delete both."""

from __future__ import annotations

FUSION_DT = {"--iree-dispatch-creation-enable-aggressive-fusion", "--iree-opt-data-tiling"}

KNOWN = {
    "iree-one-operand-reduction": lambda prog, plan, out: out.kind in ("reject", "plan-compile") and
        "one-operand-reduction" in prog.features and "'vector.contract' op invalid accumulator" in out.detail,
    "iree-data-tiling-segfault": lambda prog, plan, out: out.kind == "plan-compile" and
        "--iree-opt-data-tiling" in plan.flags and "iree-compile crashed (killed by SIGSEGV)" in out.detail,
    "reduce-body-ignores-inputs": lambda prog, plan, out: out.kind in ("wrong", "reject") and
        "reduce-body-ignores-inputs" in prog.features,
    "init-is-operand": lambda prog, plan, out: out.kind in ("reject", "plan-compile") and
        "init-is-operand" in prog.features and "write affecting operations on global" in out.detail,
    "iree-fusion-with-data-tiling": lambda prog, plan, out: out.kind == "plan-compile" and
        FUSION_DT <= set(plan.flags) and "write affecting operations on global" in out.detail,
}

# Bugs of one target only: (program, plan, outcome, target name).
KNOWN_ON = {
    # IREE's SPIR-V BaseDistribute code for a contraction whose summed loop comes before a
    # parallel one, on lavapipe: elements left at the init (IREE alone, no sft plan)
    "iree-spirv-summed-loop-first": lambda prog, plan, out, target: out.kind == "wrong" and
        target.startswith("vulkan:") and "summed-loop-not-innermost" in prog.features,
}


def known_bug(program, plan, outcome, target: str = "host") -> str | None:
    """The name of the open bug a failed outcome on `target` is, or None (a new failure)."""
    found = next((name for name, seen in KNOWN.items() if seen(program, plan, outcome)), None)
    return found or next((name for name, seen in KNOWN_ON.items()
                          if seen(program, plan, outcome, target)), None)
