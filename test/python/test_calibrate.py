"""The host calibration: the kernel model's fit, the stored calibration and its host identity, the
ISA-derived model structure, and the tool. No timing here: fitted times come from the model."""

import dataclasses
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from sft import calibrate as cal
from sft import calibrate_layouts as layouts
from sft.calibrate import THIN_MATMUL
from sft import kernel_fit as fit
from sft.cost.hardware import CpuModelParams, TargetDesc
from sft.cost.host import AVX2, AVX512
from sft.cost.model import THIN_EXTENT, predict
from sft.space.tiles import tile_space
from sft.targets import host as host_target


def _desc(isa) -> TargetDesc:
    cpu = CpuModelParams.for_isa(isa.vector_bytes)
    return TargetDesc(name=f"test-{isa.name}", cores=1, simd_f32=isa.lanes_f32,
                      vector_registers=isa.vector_registers,
                      peak_flops_f32=2 * cpu.fma_per_cycle * isa.lanes_f32 * 2e9,
                      l1_bytes=48 << 10, l2_bytes=2 << 20, l1_bandwidth=2e11, l2_bandwidth=5e10,
                      dram_bandwidth=2e10, dispatch_overhead=0.0, workgroup_overhead=0.5e-6,
                      serial_invoke_overhead=2e-6, serial_dispatch_overhead=0.2e-6, cpu=cpu)


def _synthetic_samples(desc: TargetDesc, isa, count: int = fit.FIT_CANDIDATES) -> list:
    """The fit's own sample of each fit kernel, timed by the model under `desc`."""
    samples = []
    for kernel in fit.FIT_KERNELS:
        space = tile_space(kernel, isa=isa)
        rows = space.candidates[fit.sample_indices(len(space), count)[1:]]
        seconds = predict(kernel, rows, desc, 1) + fit.call_seconds(desc)
        samples.append(fit.FitSample(kernel, rows, seconds))
    return samples


@pytest.mark.parametrize("isa", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_the_fit_recovers_parameters_the_times_were_made_with(isa):
    start = _desc(isa)
    truth = dataclasses.replace(start, peak_flops_f32=start.peak_flops_f32 * 0.6,
                                workgroup_overhead=1.5e-6, cpu=dataclasses.replace(
                                    start.cpu, fma_latency=5.0, step_cycles=6.0, spill_ops=4.0,
                                    partial_tile_ops=2.0, issue_overlap=0.3))
    samples = _synthetic_samples(truth, isa, count=40)
    result = fit.fit_kernel_model(samples, start, prior_weight=0.0)
    assert result.rms_log_error_before > 0.1
    assert result.rms_log_error < 0.01        # the times are the model's: it reproduces them
    assert result.pairwise > 0.99
    fitted = result.desc
    assert fitted.peak_flops_f32 == pytest.approx(truth.peak_flops_f32, rel=0.05)
    for name in ("fma_latency", "step_cycles"):  # what every kernel of the sample depends on
        assert getattr(fitted.cpu, name) == pytest.approx(getattr(truth.cpu, name), rel=0.1), name
    # The issue rates are the ISA's, never fitted.
    assert (fitted.cpu.fma_per_cycle, fitted.cpu.loads_per_cycle) == (start.cpu.fma_per_cycle,
                                                                      start.cpu.loads_per_cycle)
    # The calibration's own fit, pulled toward the defaults, still reproduces the times closely.
    pulled = fit.fit_kernel_model(samples, start)
    assert pulled.rms_log_error < 0.05 and pulled.pairwise > 0.98


def test_the_fit_kernels_are_not_the_suites():
    """sft-bench quality measures the model on the suite's kernels: none may be a fit kernel.
    (The suite's contraction shapes, as `sft-bench quality` lists them.)"""
    suite = {(8, 128, 64), (32, 1024, 256), (32, 256, 1024), (8, 32, 32, 32), (64, 128, 128),
             (64, 512, 128), (64, 128, 512), (64, 384, 128), (512, 64, 64), (8, 256, 256, 16),
             (8, 256, 16, 256), (128, 768, 256), (16, 64, 64, 32), (16, 64, 32, 64),
             (128, 256, 256), (128, 1024, 256)}
    assert not suite & {k.domain for k in fit.FIT_KERNELS}
    assert THIN_MATMUL.domain not in suite and min(THIN_MATMUL.domain) == THIN_EXTENT
    assert any(k.b_transposed for k in fit.FIT_KERNELS) and not all(k.b_transposed for k in fit.FIT_KERNELS)
    assert fit.sample_indices(500) == fit.sample_indices(500)  # fixed and seeded
    assert fit.sample_indices(500)[0] == 0 and len(fit.sample_indices(500)) == fit.FIT_CANDIDATES


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))
    from sft import paths

    monkeypatch.setattr(paths, "_warned", set())
    return tmp_path


def _calibration(**identity) -> dict:
    return {"identity": {**host_target.calibration_identity(), **identity},
            "desc": {"peak_flops_f32": 123e9, "serial_invoke_overhead": 3e-6},
            "cpu": {"fma_latency": 4.5, "step_cycles": 3.25}, "fit": {"samples": 60}}


def test_a_stored_calibration_round_trips(cache):
    detected = host_target.detected_description()
    assert host_target.calibrated_description() == detected  # never calibrated
    host_target.store_calibration(_calibration())
    desc = host_target.calibrated_description()
    assert desc.peak_flops_f32 == 123e9 and desc.serial_invoke_overhead == 3e-6
    assert desc.cpu.fma_latency == 4.5 and desc.cpu.step_cycles == 3.25
    assert desc.cpu.overlap == detected.cpu.overlap  # what the fit did not set stays
    assert host_target.calibration_state() == "calibrated"
    assert TargetDesc.from_dict(json.loads(desc.to_json())) == desc
    # Another host's calibration is kept beside this one's, not over it.
    host_target.store_calibration(_calibration(cores=desc.cores + 7))
    hosts = json.loads(host_target.calibration_file().read_text())["hosts"]
    assert len(hosts) == 2 and host_target.calibrated_description() == desc


def test_another_hosts_calibration_is_ignored_with_one_warning(cache):
    host_target.store_calibration(_calibration(isa="neon", cores=64))
    with pytest.warns(UserWarning, match="another host or ISA"):
        desc = host_target.calibrated_description()
    assert desc == host_target.detected_description()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process, not once per target built
        assert host_target.calibrated_description() == desc


def test_a_retired_field_of_an_earlier_calibration_is_dropped_not_the_calibration(cache):
    """A calibration stored before micro-kernels without data tiling were dropped from the
    option space still applies, without their measured speed-up and without a warning."""
    stored = _calibration()
    stored["desc"]["ukernel_speedup"] = 1.05
    host_target.store_calibration(stored)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        desc = host_target.calibrated_description()
    assert desc.peak_flops_f32 == 123e9 and not hasattr(desc, "ukernel_speedup")


def test_an_older_calibration_file_is_ignored_with_a_warning(cache):
    host_target.calibration_file().write_text(json.dumps({"peak_flops_f32": 1e11}))
    with pytest.warns(UserWarning, match="not a valid calibration"):
        assert host_target.calibrated_description() == host_target.detected_description()


def test_avx2_and_avx512_give_different_structure_spaces_and_predictions():
    kernel = fit.FIT_KERNELS[0]  # B contiguous along k: the transpose depends on the ISA
    d512, d2 = _desc(AVX512), _desc(AVX2)
    assert d512.cpu.shuffle_fma_share == 1.0 and d2.cpu.shuffle_fma_share == 0.0
    assert d512.simd_f32 == 2 * d2.simd_f32 and d512.vector_registers == 2 * d2.vector_registers
    s512, s2 = tile_space(kernel, isa=AVX512), tile_space(kernel, isa=AVX2)
    rows512, rows2 = {tuple(r) for r in s512.candidates}, {tuple(r) for r in s2.candidates}
    assert rows512 != rows2 and rows512 & rows2
    common = np.array(sorted(rows512 & rows2 - {(0, 0, 0, 0, 0)}))
    p512, p2 = predict(kernel, common, d512, 1), predict(kernel, common, d2, 1)
    assert not np.allclose(p512, p2)
    assert np.median(p2 / p512) > 1.3  # half the lanes: slower on the same tiles


def test_calibrate_help():
    proc = subprocess.run([sys.executable, "-m", "sft.tools.calibrate", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "sft-calibrate" in proc.stdout and "--fit-rounds" in proc.stdout


def test_the_executor_reading_keeps_the_least_disturbed_of_its_readings(monkeypatch):
    """Other work only takes cores away from the parallel executor: of three readings of the
    slope from the small to the large matmul, the highest speed-up is kept (here the second:
    the large matmul on both cores 2x faster on added work), with its small-matmul times."""
    readings = iter([
        {"sync": 1.0, "task": 1.6}, {"sync": 17.0, "task": 17.6},   # 0.0: a core taken away
        {"sync": 1.0, "task": 1.5}, {"sync": 17.0, "task": 9.5},    # 2x on added work
        {"sync": 1.0, "task": 1.4}, {"sync": 17.0, "task": 12.4},   # 1.45x
    ])
    monkeypatch.setattr(cal, "compile_module", lambda *a, **k: None)
    monkeypatch.setattr(cal, "called", lambda variants, *a, **k: next(readings))
    efficiency, small, large = cal.executor_reading(2, rounds=1)
    assert efficiency == pytest.approx(1.0) and small["task"] == 1.5 and large["task"] == 9.5
    assert next(readings, None) is None  # all three were read


def test_the_fma_rate_program_computes_its_chains():
    """What sft-calibrate times as the FMA rate is the FMAs it counts: each of the chains steps
    c <- c * x + x from c = its number, and the chains are summed."""
    from sft.backend import compile_module, load
    from sft.targets import get_target

    chains, steps, n = 3, 5, 64
    fn = load(compile_module(cal.fma_program(chains, steps, n), get_target("host")), driver="local-sync")
    x = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    want = np.zeros(n, np.float64)
    for c in range(chains):
        value = np.full(n, c + 1.0)
        for _ in range(steps):
            value = value * x + x
        want += value
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-5, atol=1e-5)


def test_rooflines_and_floors_use_the_measured_fma_rate():
    from sft.cost.model import compute_floor, roofline

    desc = _desc(AVX512)
    measured = dataclasses.replace(desc, fma_peak_f32=desc.peak_flops_f32 / 2.5)
    flops = 1e9
    assert roofline(flops, 0, measured, 1) == pytest.approx(flops / measured.fma_peak_f32)
    assert roofline(flops, 0, desc, 1) == pytest.approx(flops / desc.peak_flops_f32)
    assert compute_floor(flops, measured, 1) == pytest.approx(flops / measured.fma_peak_f32)
    assert compute_floor(flops, desc, 1) == pytest.approx(flops / desc.peak_flops_f32)


def test_no_kernel_is_predicted_faster_than_the_measured_fma_rate():
    """The fitted scale may exceed what a core issues; the measured FMA rate floors every
    kernel's compute, and what its memory costs comes on top (it only ever raises a
    prediction); a rate far above the fitted scale changes nothing."""
    from sft.cost.model import peak_seconds

    desc = _desc(AVX512)
    measured = dataclasses.replace(desc, fma_peak_f32=desc.peak_flops_f32 / 2.5)
    kernel = fit.FIT_KERNELS[0]
    rows = tile_space(kernel, isa=AVX512).candidates
    free, floored = predict(kernel, rows, desc, 1), predict(kernel, rows, measured, 1)
    flops = 2.0 * kernel.m * kernel.n * kernel.k
    assert peak_seconds(kernel, measured, 1) == pytest.approx(flops / measured.fma_peak_f32)
    assert peak_seconds(kernel, desc, 1) == 0.0  # not measured: no floor
    assert (free < flops / measured.fma_peak_f32).any()  # the case the floor is for
    assert (floored >= (1 - 1e-3) * flops / measured.fma_peak_f32).all()
    assert (floored >= free).all() and (floored > free).any()
    far = dataclasses.replace(desc, fma_peak_f32=desc.peak_flops_f32 * 100)
    assert np.array_equal(predict(kernel, rows, far, 1), free)


def test_the_executor_probe_computes_an_mlp():
    from sft.backend import compile_module, load
    from sft.targets import get_target

    m, d, h = 4, 8, 16
    fn = load(compile_module(cal.probe_program(m, d, h), get_target("host")), driver="local-sync")
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((m, d), (d, h), (h, d)))
    np.testing.assert_allclose(fn(x, w1, w2)[0], np.maximum(x @ w1, 0) @ w2, rtol=1e-4, atol=1e-4)


def test_the_relayout_programs_copy_and_transpose():
    from sft.backend import compile_module, load
    from sft.targets import get_target

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for transpose, want in ((False, x + x), (True, (x + x).T)):
        text = layouts.relayout_program(3, 4, transpose)
        fn = load(compile_module(text, get_target("host")), driver="local-sync")
        np.testing.assert_array_equal(fn(x)[0], want)


def test_the_executors_call_cost_is_read_with_the_weights_held(monkeypatch):
    """A call's cost on the parallel executor: the probe's time there less its work (the inline
    time less the inline driver's costs) at the executor's speed-up and its split dispatches'
    cost; the lowest of the readings, each with the weights uploaded once (uploads cost the
    executor more than the inline driver, and no compiled model uploads its weights a call)."""
    readings = iter([{"sync": 300e-6, "task": 400e-6}, {"sync": 300e-6, "task": 260e-6},
                     {"sync": 300e-6, "task": 300e-6}])
    seen = []

    def called(variants, inputs, rounds, calls, progress=None, keep=(), resident=(), processes=1):
        seen.append((keep, resident, processes))
        return next(readings)

    from sft.targets import get_target

    monkeypatch.setattr(cal, "compile_module", lambda *a, **k: None)
    monkeypatch.setattr(cal, "called", called)
    host = get_target("host")
    cost = cal.executor_call_cost(host, speedup=2.0, dispatch=5e-6, inline=(2e-6, 1e-6),
                                  python_call=10e-6, rounds=1)
    profile = cal.profile(cal.probe_program(*cal.PROBE_MLP), host)
    work = 300e-6 - 10e-6 - 2e-6 - profile.dispatch_count * 1e-6
    assert cost == pytest.approx(260e-6 - 10e-6 - work / 2 - profile.split_count * 5e-6)
    assert all(keep == (0,) and resident == (1, 2) for keep, resident, _ in seen)
    assert len(seen) == cal.EXECUTOR_READINGS


def test_a_packed_weights_speed_up_is_measured_on_the_host(monkeypatch):
    from sft.targets import get_target

    monkeypatch.setattr(layouts, "PACKED_SHAPES", ((16, 64, 64),))  # small: a test's time
    speedup = layouts.packed_speedup(get_target("host"), rounds=1)
    assert np.isfinite(speedup) and speedup > 0  # (its size is the host's: not asserted)


def test_data_tilings_rates_leave_out_what_the_search_prices_apart(monkeypatch):
    # Each packed program timed whole, less its pack and unpack executables and its call as the
    # model prices them; never more than twice the whole's rate; a program that did not run,
    # no rate (the model then prices the contraction as IREE's default code).
    from sft.backend import profile
    from sft.cost.model import memory_bound
    from sft.measure import kernel_program
    from sft.space.options import DATA_TILING
    from sft.targets import get_target

    target = get_target("host")
    desc = dataclasses.replace(target.desc, serial_invoke_overhead=5e-6, serial_dispatch_overhead=1e-6)
    dispatches = profile(kernel_program(cal.MATMUL, None), target, (DATA_TILING,)).dispatches
    apart = sum(memory_bound(d, desc, 1) for d in dispatches if not d.is_contraction) + 5e-6 + len(dispatches) * 1e-6
    assert apart > 6e-6 and any(d.is_relayout for d in dispatches)  # the packs are there
    whole = {"data_tiling_rate": apart + 1e-3, "data_tiling_ukernel_rate": apart * 1.5,
             "data_tiling_thin_rate": None, "data_tiling_ukernel_thin_rate": None}
    monkeypatch.setattr(cal, "compile_module", lambda *a, **k: None)
    monkeypatch.setattr(cal, "benchmark", lambda variants, *a, **k: {n: whole[n] for n in variants})
    rates = cal.data_tiling_rates(target, desc, rounds=1)
    assert rates == pytest.approx({"data_tiling_rate": cal.MATMUL.flops / 1e-3,
                                   "data_tiling_ukernel_rate": cal.MATMUL.flops / (apart * 0.75)})


def _updated(optimizer: str, g, w, state):
    """numpy's update of weight `w` and its `state` by gradient `g` (`UPDATE_BODIES`)."""
    if optimizer == "sgd":
        mom = g + np.float32(0.9) * state[0]
        return w - np.float32(0.01) * mom, mom
    m = np.float32(0.9) * state[0] + np.float32(0.1) * g
    v = np.float32(0.999) * state[1] + np.float32(0.001) * g * g
    step = (m / np.float32(0.6513216)) / (np.sqrt(v / np.float32(0.0099551)) + np.float32(1e-8))
    return w * np.float32(0.99999) - np.float32(0.001) * step, m, v


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("transposed", [False, True])
def test_the_update_programs_compute_a_gradient_and_its_optimizers_update(transposed, optimizer):
    """The transposed cost's programs: g = x @ dy and the optimizer's update of the weight and
    its state, all passed [N, M] either way and read across rows or as a [M, N] view."""
    from sft.backend import compile_module, load
    from sft.targets import get_target

    m, n, k = 4, 6, 3
    fn = load(compile_module(layouts.update_program(m, n, k, transposed, optimizer), get_target("host")),
              driver="local-sync")
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    w, *state = (rng.standard_normal((n, m), np.float32) for _ in range(1 + len(cal.UPDATE_BODIES[optimizer][0])))
    state = [np.abs(s) for s in state]  # (AdamW's second moment is never negative)
    as_held = (lambda a: a) if transposed else (lambda a: a.reshape(m, n))
    g = (x @ dy).T if transposed else x @ dy
    want = _updated(optimizer, g, as_held(w), [as_held(s) for s in state])
    got = fn(x, dy, w, *state)
    assert len(got) == len(want)
    for ours, theirs in zip(got, want):
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer, ops", [("sgd", 4), ("adamw", 15)])
def test_iree_profile_counts_a_transposed_updates_bytes_and_body_ops(optimizer, ops):
    """The profile's transposed bytes (the weight, its state and their new values, [N, M] f32)
    and work (their points times the body's ops, constants left out) of the update programs;
    none where they are read in order."""
    from sft.backend import profile
    from sft.targets import get_target

    m, n, k = 32, 16, 8
    tensors = 2 * (1 + len(cal.UPDATE_BODIES[optimizer][0]))
    across = profile(layouts.update_program(m, n, k, True, optimizer), get_target("host")).dispatches
    in_order = profile(layouts.update_program(m, n, k, False, optimizer), get_target("host")).dispatches
    assert sum(d.transposed_bytes for d in across) == tensors * m * n * 4
    assert sum(d.transposed_work for d in across) == ops * m * n
    assert sum(d.transposed_bytes + d.transposed_work for d in in_order) == 0


def test_the_transposed_costs_give_both_updates_extra_time(monkeypatch):
    """Per shape, the byte cost (in bytes at L2's rate) and op cost (seconds a point) that give
    SGD's and AdamW's extra time across rows from their profiles' bytes and work; the shapes'
    geometric mean and mean."""
    from sft.targets import get_target

    m, n = 32, 16
    sgd, adamw = (4 * m * n * 4, 4 * m * n), (6 * m * n * 4, 15 * m * n)  # (bytes, work)
    c, o = 3.0, 2e-9  # the first shape's; the second's: bytes alone, 1.5
    extra = [c * sgd[0] / 1e9 + o * sgd[1], c * adamw[0] / 1e9 + o * adamw[1],
             1.5 * sgd[0] / 1e9, 1.5 * adamw[0] / 1e9]
    times = iter([{"in order": 1e-4, "transposed": 1e-4 + e} for e in extra])
    monkeypatch.setattr(layouts, "UPDATE_SHAPES", ((m, n, 8), (n, m, 8)))
    monkeypatch.setattr(layouts, "benchmark", lambda *a, **k: next(times))
    cost, op_cost = layouts.transposed_update_cost(get_target("host"), l2_bandwidth=1e9, rounds=1)
    assert cost == pytest.approx(np.sqrt(3.0 * 1.5), rel=1e-6)
    assert op_cost == pytest.approx(o / 2, rel=1e-6)


def test_a_fused_updates_cost_is_its_time_beyond_the_matmul_over_its_bytes(monkeypatch):
    """Per shape and optimizer: (the update program's time less its matmul's) over its extra
    bytes' time at L2's rate, the profile's bytes; the geometric mean, at least 1."""
    from sft.backend import profile
    from sft.targets import get_target

    target = get_target("host")
    m, n = 32, 16
    shapes = ((m, n, 8), (n, m, 8))
    extra = {}
    for shape in shapes:
        for optimizer in cal.UPDATE_BODIES:
            text = layouts.update_program(*shape, False, optimizer)
            found = sum(d.bytes for d in profile(text, target).dispatches if d.is_contraction)
            extra[shape, optimizer] = found - (shape[0] * 8 + 8 * shape[1] + shape[0] * shape[1]) * 4
    costs = iter([2.0, 8.0, 0.5, 4.0])  # (0.5 is held at 1)
    added = iter([next(costs) * b / 1e9 for b in extra.values()])  # in the order timed
    monkeypatch.setattr(layouts, "UPDATE_SHAPES", shapes)
    monkeypatch.setattr(layouts, "benchmark", lambda variants, *a, **k: (
        {"alone": 1e-4} if "alone" in variants else {"fused": 1e-4 + next(added)}))
    cost = layouts.fused_update_cost(target, l2_bandwidth=1e9, rounds=1)
    assert cost == pytest.approx((2.0 * 8.0 * 1.0 * 4.0) ** 0.25, rel=1e-6)


def test_the_transposed_costs_hold_the_bytes_at_the_streaming_rate_and_ops_at_no_cost():
    # (streamed seconds, work, extra seconds) of SGD and AdamW
    assert layouts._bytes_and_ops([(1.0, 4.0, 1.0), (1.5, 15.0, 2.0)]) == pytest.approx((1.0, 0.5 / 19))
    assert layouts._bytes_and_ops([(1.0, 4.0, 5.0), (1.5, 15.0, 5.0)]) == pytest.approx((4.0, 0.0))
    assert layouts._bytes_and_ops([(1.0, 4.0, 2.4), (1.5, 15.0, 4.5)]) == pytest.approx((2.0, 0.1))


