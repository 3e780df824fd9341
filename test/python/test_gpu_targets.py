"""Every suite model compiles for every GPU target with search="model" (compile only: no GPU is
needed, or assumed). Where a target's kernel configs are searched, the configs the search chose
are ones IREE accepts."""

import pytest

from sft.api import compile_program
from sft.models import SUITE
from sft.program import prepare

GPU_TARGETS = ["cuda:sm_80", "cuda:sm_90", "rocm:gfx942", "vulkan:rdna3"]


@pytest.fixture(scope="module")
def programs():
    """Each suite model imported once (and raised again per compile from its sft text)."""
    found = {}
    for name, case in SUITE.items():
        found[name] = prepare(case.build(), case.inputs())[0]
    return found


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("model", list(SUITE))
def test_suite_model_compiles_with_search(programs, model, target):
    program = programs[model]
    plan, report, _, planned, artifact = compile_program(program, program.module(), target,
                                                         search="model")
    assert artifact.dispatch_count > 0 and artifact.target.name == target
    assert not report.fallback, f"the searched plan for {model} failed on {target}"
    for op, config in plan.tiles:  # what the search chose is in the program IREE compiled
        assert "compilation_info" in planned
