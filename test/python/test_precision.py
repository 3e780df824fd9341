"""Mixed precision where the user allows it (`precision="bf16"` / `"f16"`): a search choice per
contraction kernel (inputs rounded, f32 accumulation), recorded in the plan and said in the
report, never silent; the default "f32" changes nothing."""

import dataclasses
import json

import numpy as np
import pytest
import torch

import sft
from sft.search.compile import compile_program
from sft.search.strategy import search_plan, searched_plan
from sft.errors import SftError
from sft.models import SUITE
from sft.passes.low_precision import castable
from sft.plan import Plan
from sft.program import prepare
from sft.decisions import GpuConfig
from sft.targets import get_target
from sft.tuning_db import TuningDB


@pytest.fixture(scope="module")
def mlp():
    case = SUITE["mlp"]
    model, inputs = case.build(), case.inputs()
    return model, inputs, prepare(model, inputs)[0]


def test_f32_default_leaves_plans_unchanged(mlp):
    """The default searches as before (no low precision, the same plan as precision="f32"), and
    on the host bf16 is not offered at all (IREE's bf16 CPU code measured slower)."""
    program = mlp[2]
    host = get_target("host")
    default, report = search_plan(program.sft_text, host)
    assert default.low_precision == () and "accumulation" not in report.to_text()
    assert search_plan(program.sft_text, host, "f32")[0] == default
    assert search_plan(program.sft_text, host, "bf16")[0] == default
    assert "low_precision" not in default.to_json()  # f32 plans read and hash as before


def test_forced_bf16_on_host_runs_within_bf16_tolerance(mlp):
    model, inputs, program = mlp
    ops = sorted(castable(program.module()))
    assert len(ops) == 2  # the MLP's two linear layers
    with torch.no_grad():
        expected = model(*inputs).numpy()
    exact = sft.compile(model, inputs)
    low = sft.compile(model, inputs, plan=Plan(low_precision=tuple((op, "bf16") for op in ops)),
                      keep_ir=True)
    assert "xbf16>" in low.stages.lowered
    y_exact, y_low = exact(*inputs), low(*inputs)
    assert y_low.dtype == y_exact.dtype == torch.float32 and y_low.shape == y_exact.shape
    np.testing.assert_allclose(y_exact.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y_low.numpy(), expected, rtol=2e-2, atol=2e-2)
    assert not np.allclose(y_low.numpy(), expected, rtol=1e-5, atol=1e-6)  # it really rounded
    f16 = sft.compile(model, inputs, plan=Plan(low_precision=((ops[0], "f16"),)))
    np.testing.assert_allclose(f16(*inputs).numpy(), expected, rtol=2e-2, atol=2e-2)


def test_gpu_search_chooses_bf16_with_mma_and_says_so(mlp, tmp_path, monkeypatch):
    # A tuning database of its own: the f32 plan it records below would otherwise be replayed
    # (without kernel choices) by other tests of the session compiling mlp for cuda:sm_90.
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))
    program = mlp[2]
    plan, report, _, planned, artifact = compile_program(program, program.module(), get_target("cuda:sm_90"),
                                                         search="model", precision="bf16")
    assert not report.fallback and artifact.dispatch_count > 0
    assert plan.low_precision and all(t == "bf16" for _, t in plan.low_precision)
    assert set(op for op, _ in plan.low_precision) <= set(castable(program.module()))
    assert "bf16 inputs, f32 accumulation on ops" in report.chosen
    assert "bf16 inputs, f32 accumulation" in report.to_text()
    # a twin never runs IREE's own config: no default prediction, written as JSON's null
    assert "Infinity" not in report.to_json()
    assert any(k["precision"] == "bf16" and k["default_predicted_s"] is None
               for k in json.loads(report.to_json())["kernels"])
    low = [c for c in report.choices if c.precision == "bf16"]
    assert low and all(isinstance(c.space.config(c.best), GpuConfig) for c in low)
    kinds = [c.space.config(c.best).mma_kind for c in low]
    assert all(k == "NV_MMA_SYNC_F32_16x8x16_BF16" for k in kinds), kinds
    assert any(c.mma_kind == "NV_MMA_SYNC_F32_16x8x16_BF16" for _, c in plan.tiles)
    assert "xbf16>" in planned and Plan.from_json(plan.to_json()) == plan
    # the f32 search of the same program never replays the bf16 plan
    f32_plan = compile_program(program, program.module(), get_target("cuda:sm_90"), search="model")[0]
    assert f32_plan.low_precision == ()


def test_tuning_db_keys_the_precision(mlp, tmp_path):
    program, db = mlp[2], TuningDB(tmp_path / "tuning.sqlite")
    low, _ = searched_plan(program, get_target("cuda:sm_90"), "model", db, "bf16")
    exact, report = searched_plan(program, get_target("cuda:sm_90"), "model", db)
    assert low.low_precision and exact.low_precision == () and not report.replayed
    again, report = searched_plan(program, get_target("cuda:sm_90"), "model", db, "bf16")
    assert again == low and report.replayed and "bf16 inputs" in report.chosen


def test_plan_json_roundtrip_and_bad_values():
    plan = Plan(low_precision=((2, "bf16"), (7, "f16")))
    assert Plan.from_json(plan.to_json()) == plan and not plan.is_empty
    with pytest.raises(SftError, match=r"low_precision\[1\]: \"f8\" is not a low-precision input type"):
        Plan.from_json('{"low_precision": [[2, "bf16"], [7, "f8"]]}')
    with pytest.raises(SftError, match="low_precision must be a list of"):
        Plan.from_json('{"low_precision": ["bf16"]}')


def test_precision_is_validated(mlp):
    program = mlp[2]
    with pytest.raises(SftError, match="precision must be one of 'f32', 'bf16', 'f16', not 'fp8'"):
        compile_program(program, program.module(), get_target("host"), search="model", precision="fp8")
    with pytest.raises(SftError, match="search='model' only"):
        compile_program(program, program.module(), get_target("host"), search="verify", precision="bf16")
    with pytest.raises(SftError, match="not a contraction of f32 inputs"):
        sft.compile(*mlp[:2], plan=Plan(low_precision=((0, "bf16"),)))


def test_a_low_precision_pick_that_fails_falls_back_to_plans_the_gate_takes(mlp, tmp_path, monkeypatch):
    """A bf16 search's pick that iree-compile refuses: its fallbacks are judged by the trust
    gate as they were ranked (low precision among their decisions), without the casts' op ids
    that only the pick's own plan has."""
    from sft.search.compile import _fallbacks

    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))
    target = get_target("cuda:sm_90")
    plan, report = search_plan(mlp[2].sft_text, target, precision="bf16")
    assert any(c.precision != "f32" for o in report.ranked for c in o.kernels)
    failed = dataclasses.replace(plan, flags=(*plan.flags, "--iree-no-such-flag"))
    found = _fallbacks(report, failed, target)
    assert all(isinstance(p, Plan) and p != failed for _, p in found)
