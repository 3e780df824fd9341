"""sft's f64 tanh, sin, cos, atan, atan2 and erf (mathlib, passes/f64_math.py), which IREE's
CPU backend cannot compile: within 2 ulp of the C library's (glibc's, under 1 ulp) on 10^6
inputs spanning every exponent, zeros, infinities, NaN and the algorithms' breakpoints, first
as numpy runs the algorithms, then compiled by IREE as sft lowers them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sft
from sft.mathlib.numpy_arith import evaluate

REFERENCE = {"tanh": math.tanh, "sin": math.sin, "cos": math.cos, "atan": math.atan,
             "erf": math.erf, "atan2": math.atan2}
EDGES = np.array([0.0, 5e-324, 2.2250738585072014e-308, 1e-300, 2.0 ** -28, 1e-8, 0.5, 0.55,
                  0.84375, 1.0, 1.5, 2.0, 2.5, 3.75, 6.0, 7 / 16, 11 / 16, 19 / 16, 39 / 16, 22.0,
                  np.pi / 4, np.pi / 2, np.pi, 1e6, 1647098.9, 1647099.0, 1e22, 2.0 ** 66,
                  709.0, 710.0, 746.0, 1e300, 1.7976931348623157e308, np.inf, np.nan])


def inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    quarter = n // 4
    any_double = rng.integers(0, 0x7FF0_0000_0000_0000, quarter, dtype=np.int64).view(np.float64)
    parts = [rng.uniform(-1, 1, quarter), rng.uniform(-10, 10, quarter),
             rng.standard_normal(quarter) * 10.0 ** rng.integers(-20, 20, quarter),
             any_double * rng.choice([-1.0, 1.0], quarter)]
    return np.concatenate([*parts, EDGES, -EDGES])


def reference(name: str, *args: np.ndarray) -> np.ndarray:
    def one(*v):
        try:
            return REFERENCE[name](*v)
        except ValueError:  # math.sin(inf) and the like: NaN in IEEE arithmetic
            return math.nan
    return np.array([one(*v) for v in zip(*args)])


def ulp_errors(got: np.ndarray, want: np.ndarray, flushed: bool = False) -> np.ndarray:
    """|got - want| in ulps of `want`; NaN against NaN and zeros of the same sign are 0, a
    wrong sign of zero is inf. `flushed`: a subnormal `want` read as zero counts as right (IREE's
    CPU code flushes subnormals to zero)."""
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    same |= np.isnan(got) & np.isnan(want)
    if flushed:
        tiny = np.abs(want) < 2.2250738585072014e-308
        same |= tiny & (np.abs(got) < 2.2250738585072014e-308)
    spacing = np.spacing(np.abs(want))
    with np.errstate(all="ignore"):
        errors = np.abs(got - want) / np.where(spacing == 0, 5e-324, spacing)
    return np.where(same, 0.0, np.nan_to_num(errors, nan=np.inf))


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_within_two_ulp_on_a_million_inputs(name):
    x = inputs(1_000_000, seed=1)
    args = (x, inputs(1_000_000, seed=2)) if name == "atan2" else (x,)
    errors = ulp_errors(evaluate(name, *args), reference(name, *args))
    worst = int(np.argmax(errors))
    assert errors[worst] <= 2.0, \
        f"{name}{tuple(a[worst] for a in args)}: {errors[worst]:.3g} ulp from the C library's"


def _text(name: str, n: int) -> str:
    call = "math.atan2 %x, %y" if name == "atan2" else f"math.{name} %x"
    return f"""
#map = affine_map<(d0) -> (d0)>
func.func @main(%a: tensor<{n}xf64>, %b: tensor<{n}xf64>) -> tensor<{n}xf64> {{
  %e = tensor.empty() : tensor<{n}xf64>
  %r = linalg.generic {{indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}}
      ins(%a, %b : tensor<{n}xf64>, tensor<{n}xf64>) outs(%e : tensor<{n}xf64>) {{
  ^bb0(%x: f64, %y: f64, %o: f64):
    %t = {call} : f64
    linalg.yield %t : f64
  }} -> tensor<{n}xf64>
  return %r : tensor<{n}xf64>
}}"""


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_compiled_within_two_ulp(name):
    """Through sft.compile on IREE's CPU backend, which fails these ops by itself. IREE's CPU
    code flushes subnormals to zero, inputs included: the reference gets them flushed too."""
    x, y = inputs(4096, seed=3), inputs(4096, seed=4)
    compiled = sft.compile(_text(name, len(x)), search="none")
    got = np.asarray(compiled(x, y))
    flush = lambda a: np.where(np.abs(a) < 2.2250738585072014e-308, np.copysign(0.0, a), a)  # noqa: E731
    args = (flush(x), flush(y)) if name == "atan2" else (flush(x),)
    errors = ulp_errors(got, reference(name, *args), flushed=True)
    worst = int(np.argmax(errors))
    assert errors[worst] <= 2.0, \
        f"{name}{tuple(a[worst] for a in args)}: {got[worst]!r}, {errors[worst]:.3g} ulp off"
