"""The tuning farm on a local Ray cluster (two workers, shared by the module's tests): verify
chooses there what it chooses here, a worker that dies is a recorded failure whose candidates
are queued once more, and a farm without ray installed is one clear error.

No timing is asserted beyond one plan that wins by far: local-sync on a tiny program, where
local-task's thread pool costs more than the work (a small linear layer, measured on a loaded
2-core host: 25-33 us against 52-136 us)."""

import os
import sys

import numpy as np
import pytest
import torch

import sft
from sft.backend import compile_module
from sft.backend import farm as farm_module
from sft.backend.timing import loaded_call
from sft.errors import SftError
from sft.measure import SEARCH_REVISION, verify
from sft.program import lower, prepare
from sft.search.strategy import search_plan
from sft.targets import get_target
from sft.tuning_db import TuningDB

IDENTITY = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %a : tensor<4xf32>
  return %b : tensor<4xf32>
}"""


def die_on_first_try(kind, attempt):
    """A test hook (run in the Ray worker): the worker dies on each task's first try."""
    if attempt == 0:
        os._exit(7)


def die_timing(kind, attempt):
    """A test hook: every timing task's worker dies."""
    if kind == "time":
        os._exit(7)


@pytest.fixture(scope="module")
def farm():
    ray = pytest.importorskip("ray")
    # the hooks above travel by value: Ray's workers cannot import this test module by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    farm_module.shutdown()  # a cluster left by another module: this one's is known
    yield farm_module.connect("local:2")
    farm_module.shutdown()


def _tiny_verify(db_path, farm):
    """verify of a small linear layer among IREE's default, IREE alone on the import and the
    local-sync option set only (the report keeps that one: the others would be within noise of
    it), with IREE's own tiles only (top_k=0): one plan wins by far, the same here and there."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU())
    program, _ = prepare(model, (torch.randn(8, 64),))
    target = get_target("host")
    _, report = search_plan(program.sft_text, target)
    report.ranked = [o for o in report.ranked if o.options.describe() == "local-sync"]
    assert report.ranked, "local-sync is no longer an option set of the host"

    def text_of(plan):
        text = program.linalg if plan.as_imported else lower(program.module(), plan, target)[1]
        return program.for_iree(text, target)

    db = TuningDB(db_path)
    keep, resident, storage = program.timing_layout(target)
    plan = verify(report, text_of, target, program.timing_inputs(), db, top_k=0, rounds=3,
                  keep=keep, resident=resident, storage=storage, farm=farm)
    tkey = target.key(SEARCH_REVISION)
    stored = [db.measurements(c.kernel.key(), tkey) for c in report.ranked[0].kernels]
    return plan, report, stored


def test_verify_on_the_farm_chooses_as_here(farm, tmp_path):
    here, here_report, _ = _tiny_verify(tmp_path / "here.sqlite", None)
    failures = len(farm.failures)
    there, there_report, stored = _tiny_verify(tmp_path / "farm.sqlite", farm)
    assert len(farm.failures) == failures
    # the same candidates, every one compiled and timed, the same winner
    # (which candidates a second process confirms depends on how close their first times were)
    first = lambda report: {k for k in report.measured if not k.endswith("(second process)")}  # noqa: E731
    assert first(there_report) == first(here_report)
    assert all(isinstance(s, float) and s > 0 for s in there_report.measured.values())
    assert there == here and there.driver == "local-sync"
    assert any(k.startswith("op ") for k in there_report.measured)
    # the kernels' measurements (IREE's tiles, timed on the farm) reached the tuning database
    assert stored and all(len(m) == 1 and list(m.values())[0] > 0 for m in stored)


def _builders():
    artifact = compile_module(IDENTITY, get_target("host"))
    ones = [np.ones(4, np.float32)]
    return {"a": (loaded_call, (artifact, "local-sync", ones)),
            "b": (loaded_call, (artifact, "local-task", ones))}


def test_a_dead_worker_is_a_recorded_failure_and_its_candidates_go_again(farm):
    target = get_target("host")
    dying = farm_module.Farm("local:2", hook=die_on_first_try)
    built = dying.compile({"x": (IDENTITY, ())}, target)
    assert built["x"].vmfb  # the compile went again and came back
    timings = dying.time_variants(target, _builders(), rounds=1, calls=2)
    assert all(t.seconds and t.seconds > 0 for t in timings.values())
    assert len(dying.failures) == 2
    assert [f.split(" ", 1)[0] for f in dying.failures] == ["compile", "timing"]
    assert all("try 1" in f and "\n" not in f for f in dying.failures)

    dead = farm_module.Farm("local:2", hook=die_timing)
    timings = dead.time_variants(target, _builders(), rounds=1, calls=2)
    assert all(t.seconds is None and "failed twice" in t.error for t in timings.values())
    assert len(dead.failures) == 2 and "try 2" in dead.failures[1]


def test_verify_takes_the_farm_from_the_environment(farm, tmp_path, monkeypatch):
    """$SFT_RAY_ADDRESS reaches verify through sft.compile; farm="" keeps verify here."""
    import sft.search.strategy as strategy

    seen = []

    def fake_verify(report, lower_plan, target, inputs, db, **kwargs):
        seen.append(kwargs["farm"])
        return sft.Plan()

    monkeypatch.setattr(strategy, "verify", fake_verify)
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))  # (no replay from another test's search)
    monkeypatch.setenv(farm_module.FARM_ENV, "local:2")
    model, x = torch.nn.Linear(8, 12), torch.randn(3, 8)
    sft.compile(model, (x,), search="verify")
    sft.compile(torch.nn.Linear(8, 16), (x,), search="verify", farm="")
    assert seen[0] is farm and seen[1] is None


def test_a_farm_without_ray_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))  # (no replay: it would need no farm)
    for ask in (lambda: farm_module.connect("local"),
                lambda: sft.compile(torch.nn.Linear(4, 4), (torch.randn(2, 4),), search="verify",
                                    farm="ray://nowhere:10001")):
        with pytest.raises(SftError) as error:
            ask()
        assert "pip install -e '.[farm]'" in str(error.value) and "\n" not in str(error.value)
