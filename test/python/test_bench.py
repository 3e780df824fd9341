"""sft-bench and the process-isolated timing under it (timings are printed, never asserted)."""

import json

import pytest

from sft.backend.timing import time_in_processes
from sft.tools import bench
from sft.tools.bench import _sft


def test_speed_table_and_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert bench.main(["speed", "relu", "--rounds", "1", "--calls", "2", "--no-torch-compile",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "relu" in printed and "geomean" in printed
    row = json.loads(out.read_text())["rows"][0]
    assert row["ok"] and row["errors"] == {}
    for variant in ("eager", "iree", "model", "verify"):
        assert row[f"{variant}_s"] > 0
    assert row["verify_search"]["measured_s"]["program iree-default"] > 0
    assert 0 < row["bound_s"] < float("inf") and "verify/bound" in printed
    # both searches held to IREE's default beyond the control's noise, each row named
    summary = json.loads(out.read_text())["summary"]
    for search in ("verify", "model"):
        assert f"{search} slower than IREE beyond the control's spread" in printed
        assert set(summary[f"{search}_slower_beyond_noise"]) <= {"relu"}


def test_a_variant_that_fails_to_build_is_recorded_not_fatal():
    medians, errors = time_in_processes({"broken": (_sft, ("no_such_model", "none"))}, 1, 1)
    assert medians == {"broken": None} and "no_such_model" in errors["broken"]


def test_unknown_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["speed", "resnet9000"])
    assert exc.value.code == 2 and "unknown model" in capsys.readouterr().err


def _dies_on_second_call():
    """A builder whose callable kills its process on the second call."""
    import os

    calls = []

    def run():
        calls.append(1)
        if len(calls) > 1:
            os._exit(3)
    return run


def test_a_worker_that_dies_mid_run_is_recorded_not_waited_for():
    medians, errors = time_in_processes({"dies": (_dies_on_second_call, ())}, 2, 1, timeout=60)
    assert medians == {"dies": None} and "died" in errors["dies"]


def test_train_jax_case_times_every_variant(capsys):
    """A JAX training step through sft-bench train: every variant timed, the ratios finite."""
    import math

    pytest.importorskip("jax")
    pytest.importorskip("optax")
    from sft.tools.bench_train import train

    result = train(["jax_mlp_b8"], rounds=1, calls=1)
    printed = capsys.readouterr().out
    assert "jax_mlp_b8" in printed
    row = result["rows"][0]
    assert row["ok"] and row["errors"] == {}
    for variant in ("jax_jit", "iree", "model", "verify", "iree_again"):
        assert math.isfinite(row[f"{variant}_s"]) and row[f"{variant}_s"] > 0, variant
    for key in ("verify_over_jax_jit", "verify_over_iree", "model_over_jax_jit", "control"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert math.isfinite(row["bound_s"]) and row["bound_s"] > 0
    # each search held to IREE's default beyond the row's control, as in sft-bench speed
    for search in ("verify", "model"):
        assert f"{search} slower than IREE beyond the control's spread" in printed
        assert set(result["summary"][f"{search}_slower_beyond_noise"]) <= {"jax_mlp_b8"}


def test_a_train_row_that_cannot_be_measured_is_reported_and_the_table_goes_on(monkeypatch, capsys):
    """One row's search failing (as the JAX GPT-2 step's once did on a Xeon host) is a line of
    the table, not the end of the run."""
    import sft.tools.bench_train_jax as bench_train_jax
    from sft.errors import SftError
    from sft.tools.bench_train import train

    def failing(name, *args):
        raise SftError(f"fusion group [200] is not convex ({name})")

    monkeypatch.setattr(bench_train_jax, "run_case", failing)
    result = train(["jax_mlp_b8", "jax_mlp_b32"], rounds=1, calls=1)
    printed = capsys.readouterr().out
    assert "jax_mlp_b8" in printed and "jax_mlp_b32" in printed and printed.count("failed: ") == 2
    assert result["rows"] == []


def test_dispatches_times_each_kernel_of_both_programs(tmp_path, capsys):
    """sft-bench dispatches: every kernel of IREE's compile and of sft's plan timed where it runs
    in its program; the MLP's two matmuls are found in both by IREE's names, with the time
    between dispatches, and together they make up the whole call."""
    from sft.tools.bench_dispatches import BETWEEN

    out = tmp_path / "dispatches.json"
    assert bench.main(["dispatches", "mlp", "--rounds", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mlp: us per call" in printed and BETWEEN in printed
    row = json.loads(out.read_text())["rows"][0]
    timed = lambda variant: [k for k, t in row["kernels"].items()
                             if k.startswith(("matmul", "mmt4d")) and (t.get(variant) or 0) > 0]
    # (whatever sft's plan is on this host: data tiling or not, its contractions are timed)
    assert len(timed("iree")) >= 2 and len(timed("sft")) >= 2
    for variant in ("iree", "sft"):
        assert row["kernels"][BETWEEN][variant] >= 0.0
        summed = sum(t.get(variant) or 0.0 for t in row["kernels"].values())
        # medians of the parts against the median of the whole: the same calls, counted once
        assert row["total_s"][variant] == pytest.approx(summed, rel=0.5)
    # the roofline: IREE's FLOPs and bytes per kernel, the bound from the host's peaks
    from sft.cost.model import roofline
    from sft.targets import get_target

    desc = get_target("host").desc
    matmuls = [w["iree"] for w in row["work"].values()
               if "iree" in w and w["iree"]["flops"] == 2 * 32 * 1024 * 256]  # 256->1024, 1024->256
    assert len(matmuls) == 2
    for work in matmuls:
        assert work["bytes"] >= 4 * (32 * 256 + 256 * 1024)
        assert work["bound_s"] == pytest.approx(roofline(work["flops"], work["bytes"], desc, 1))
        assert work["bound_s"] >= work["flops"] / desc.peak_flops_f32
    assert row["bound_s"]["iree"] == pytest.approx(
        sum(w["iree"]["bound_s"] for w in row["work"].values() if "iree" in w))
    assert row["peaks"]["flops_per_s"] == (desc.fma_peak_f32 or desc.peak_flops_f32)
    from sft.tools.bench_dispatches import plot_roofline

    plot_roofline(json.loads(out.read_text()), str(tmp_path / "roofline.png"))
    assert (tmp_path / "roofline.png").stat().st_size > 10_000


def test_plans_are_written_and_compared(tmp_path, capsys):
    """sft-bench plans: each model's searched plan per target; --compare says which differ from a
    file written before (exit 1 when any does), and a file that is not one is one error line."""
    out = tmp_path / "plans.json"
    assert bench.main(["plans", "linear", "mlp", "--targets", "host,cuda:sm_80", "--json", str(out)]) == 0
    found = json.loads(out.read_text())["plans"]
    assert sorted(found) == ["cuda:sm_80/linear", "cuda:sm_80/mlp", "host/linear", "host/mlp"]
    assert bench.main(["plans", "linear", "mlp", "--targets", "host,cuda:sm_80", "--compare", str(out)]) == 0
    assert "4 plans, 0 differ" in capsys.readouterr().out
    changed = {**found, "host/mlp": {"driver": "no-such-driver"}}
    out.write_text(json.dumps({"plans": changed}))
    assert bench.main(["plans", "mlp", "--compare", str(out)]) == 1
    assert "1 plan, 1 differ from" in capsys.readouterr().out.splitlines()[-1]
    out.write_text("not json")
    assert bench.main(["plans", "mlp", "--compare", str(out)]) == 1
    assert "not a file `sft-bench plans --json` wrote" in capsys.readouterr().err


def test_program_quality_times_every_option_set_and_stores_the_trust(tmp_path, monkeypatch, capsys):
    """sft-bench quality --programs: every ranked option set of a program and IREE's default,
    compiled and timed whole; --store puts the measured errors where the host target reads them."""
    from sft.cost.trust import KINDS
    from sft.targets.host import host

    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))
    out = tmp_path / "programs.json"
    assert bench.main(["quality", "--programs", "linear", "--rounds", "3", "--calls", "2",
                       "--store", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "linear" in printed and "pairwise" in printed and "trust factors stored" in printed
    row = json.loads(out.read_text())["rows"][0]
    assert row["measured_s"]["iree-default"] > 0
    assert len(row["measured_s"]) + len(row["failed"]) >= 8  # the option sets of a CPU target
    assert row["regret"] >= 1.0 and row["pick"] in row["measured_s"]
    # the first variant of each driver timed twice: each driver's spread, and the pairs beyond
    # it a subset of all
    assert not any(k.startswith("control") for k in row["measured_s"])
    assert set(row["control_noise"]) == {"parallel", "local-sync"}
    assert all(v >= 0.0 for v in row["control_noise"].values())
    assert row["pairs_beyond_control"][1] <= row["pairs"][1]
    # option sets that compile to one module (aggressive fusion of a lone linear) are timed once
    assert all(row["measured_s"][twin] == row["measured_s"][first] and first not in row["same_module"]
               for twin, first in row["same_module"].items())
    # where the batch splits among the cores (2 here and in CI), the split's plans are timed
    # whole too, and their error (against the whole program's pick) is the split's factor
    splits = [k for k in row["measured_s"] if k.startswith(("batch in", "weights in"))]
    assert bool(splits) == bool(row["splits"])
    assert all(kinds in (["split"], ["weights"]) for kinds, _, _ in row["errors"]
               if "split" in kinds or "weights" in kinds)
    # each error carries its pair's noise: the larger of its two drivers' control spreads
    spreads = set(row["control_noise"].values()) | {0.0}
    assert all(noise in spreads for _, _, noise in row["errors"])
    if splits:
        assert {"split", "weights"} & set(json.loads(out.read_text())["summary"]["trust_factors"])
    trust = host().trust
    assert "linear" in trust.source
    factors = dict(trust.factors)
    stored = json.loads(out.read_text())["summary"]["trust_factors"]
    assert stored and all(factors[k] == v >= 1.03 for k, v in stored.items()) and set(stored) <= set(KINDS)
    with pytest.raises(SystemExit):
        bench.main(["speed", "linear", "--store"])


def test_a_row_is_slower_only_beyond_its_controls_spread():
    from sft.tools.bench_ratios import ratios, slower_beyond_noise

    row = {"model": "m", **ratios({"iree": 1.0, "iree_again": 1.1, "verify": 1.05, "model": 1.2})}
    assert abs(row["control"] - 1 / 1.1) < 1e-9  # IREE's first process over its second
    assert slower_beyond_noise([row], "verify") == []  # 0.95x: within the control's 0.91x
    assert slower_beyond_noise([row], "model") == ["m"]  # 0.83x: beyond it
    alone = {"model": "n", **ratios({"iree": 1.0, "verify": 1.05, "model": 0.9})}
    assert slower_beyond_noise([alone], "verify") == ["n"]  # no control: below 1 is slower
