"""Every suite model compiles for every GPU target with search="model" (compile only: no GPU is
needed, or assumed), with the kernel configs the search chose: IREE accepts them, they pass
IREE's own constraint verifier where it can check them, and the plan replays from its JSON."""

import pytest

from sft.search.compile import compile_program
from sft.search.strategy import search_plan
from sft.backend.constraints import verify_config
from sft.measure import kernel_program
from sft.models import SUITE
from sft.plan import Plan
from sft.program import prepare
from sft.decisions import GpuConfig
from sft.targets import get_target

GPU_TARGETS = ["cuda:sm_80", "cuda:sm_90", "rocm:gfx942", "vulkan:rdna3"]


@pytest.fixture(scope="module")
def programs():
    """Each suite model imported once (and raised again per compile from its sft text)."""
    return {name: prepare(case.build(), case.inputs())[0] for name, case in SUITE.items()}


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("model", list(SUITE))
def test_suite_model_compiles_with_searched_configs(programs, model, target):
    program, gpu = programs[model], get_target(target)
    # Searched here, not replayed from the tuning database the test session shares.
    plan, report = search_plan(program.sft_text, gpu)
    _, _, _, planned, artifact = compile_program(program, program.module(), gpu, plan=plan)
    assert artifact.dispatch_count > 0 and artifact.target.name == target
    assert Plan.from_json(plan.to_json()) == plan
    kernels = {c.kernel.op_id: c.kernel for c in report.choices}
    for op, config in plan.tiles:
        assert isinstance(config, GpuConfig) and "compilation_info" in planned
        verdict = verify_config(gpu.module_text(kernel_program(kernels[op], config)), gpu.flags)
        assert not verdict.violations, f"op {op}: {verdict.violations}"


def test_the_search_chooses_configs_on_every_gpu(programs):
    """The matmul-heavy model gets searched configs (not only IREE's) on every GPU target, and
    an intrinsic where the target has one for the dtype (f32: ROCm's MFMA_F32_16x16x4_F32)."""
    program = programs["mlp"]
    for target in GPU_TARGETS:
        assert search_plan(program.sft_text, get_target(target))[0].tiles, target
    rocm = search_plan(program.sft_text, get_target("rocm:gfx942"))[0]
    assert any(c.mma_kind for _, c in rocm.tiles)
