"""Each dispatch's time inside its program (`backend.inprogram`), read from IREE's HAL profile."""

import numpy as np
import pytest

from sft.backend import compile_module
from sft.backend.bench import Variant, input_flags
from sft.backend.inprogram import profile_program
from sft.errors import SftError
from sft.targets import get_target

TWO_DISPATCHES = """
func.func @main(%a: tensor<64x128xf32>, %b: tensor<128x96xf32>, %s: tensor<f64>) -> tensor<64x96xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x96xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x96xf32>) -> tensor<64x96xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x128xf32>, tensor<128x96xf32>) outs(%f : tensor<64x96xf32>) -> tensor<64x96xf32>
  %t = tensor.empty() : tensor<64xf32>
  %g = linalg.fill ins(%z : f32) outs(%t : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%m : tensor<64x96xf32>) outs(%g : tensor<64xf32>) {
    ^bb0(%x: f32, %acc: f32):
      %y = arith.addf %x, %acc : f32
      linalg.yield %y : f32
  } -> tensor<64xf32>
  %s32 = tensor.extract %s[] : tensor<f64>
  %c = arith.truncf %s32 : f64 to f32
  %o = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m, %r : tensor<64x96xf32>, tensor<64xf32>) outs(%e : tensor<64x96xf32>) {
    ^bb0(%x: f32, %y: f32, %out: f32):
      %d = arith.divf %x, %y : f32
      %w = arith.mulf %d, %c : f32
      linalg.yield %w : f32
  } -> tensor<64x96xf32>
  return %o : tensor<64x96xf32>
}
"""


@pytest.fixture(scope="module")
def artifact():
    return compile_module(TWO_DISPATCHES, get_target("host"))


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 96), np.float32),
            np.float64(0.5)]


@pytest.mark.parametrize("driver", ["local-sync", "local-task"])
def test_every_dispatch_is_timed_once_per_call(artifact, driver):
    """Both dispatch functions are found by IREE's names, each run once per call; on one thread
    (local-sync) the call holds its dispatches, the rest is the time between them."""
    times = profile_program(Variant(artifact, driver), _inputs(), calls=5)
    names = [d.name for d in times.dispatches]
    assert len(names) == artifact.dispatch_count, names
    assert any("matmul" in n for n in names), names
    for d in times.dispatches:
        assert d.runs == 1.0 and d.seconds > 0 and d.tile_seconds > 0 and d.workgroups >= 1, d
    assert times.dispatch_seconds > 0 and times.call_seconds > 0
    if driver == "local-sync":
        assert times.call_seconds >= times.dispatch_seconds
        assert times.between_seconds == pytest.approx(times.call_seconds - times.dispatch_seconds)


def test_a_scalar_argument_is_passed_by_value(tmp_path):
    """0-d arrays become `--input=TYPE=VALUE` (a 0-d .npy reads back as shape [1] in IREE's
    tools, which a scalar argument refuses); the others are .npy files."""
    flags = input_flags([np.zeros((2, 3), np.float32), np.float64(0.25), np.int64(7),
                         np.bool_(True), "4x4xf32"], tmp_path)
    assert flags[0] == f"--input=@{tmp_path / 'input0.npy'}"
    assert flags[1:] == ["--input=f64=0.25", "--input=i64=7", "--input=i1=1", "--input=4x4xf32"]


def test_a_program_that_fails_is_one_error(artifact):
    """Inputs of the wrong shape: one SftError naming the function and device, no hang."""
    with pytest.raises(SftError, match="profiling main on local-sync failed"):
        profile_program(Variant(artifact, "local-sync"), [np.zeros((3, 3), np.float32)] * 2
                        + [np.float64(1.0)], calls=2)


@pytest.mark.parametrize("driver", ["local-sync", "local-task"])
def test_results_held_on_the_device_survive_later_calls(artifact, driver):
    """The CPU drivers run on IREE's caching allocator (`HOST_ALLOCATORS`), which hands freed
    blocks of one size to the next call: a result still held must never be one of them. Each
    call's result, read back after later calls wrote theirs, is numpy's for its own inputs."""
    from sft.backend.runtime import HOST_ALLOCATORS, device_flags, load

    assert "caching" in HOST_ALLOCATORS and "--device_allocator=caching" in device_flags(driver)
    loaded = load(artifact, "main", driver)
    rng = np.random.default_rng(1)
    calls = [[rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 96), np.float32),
              np.float64(scale)] for scale in (0.5, 2.0, -1.0)]
    held = [loaded.call_on_device(*inputs)[0] for inputs in calls]
    for _ in range(3):  # freed results of the same size go back to the cache
        loaded(*calls[0])
    for inputs, result in zip(calls, held):
        m = inputs[0].astype(np.float64) @ inputs[1]
        expected = m / m.sum(axis=1, keepdims=True) * inputs[2]
        np.testing.assert_allclose(np.asarray(result.to_host()), expected, rtol=2e-3, atol=1e-4)
