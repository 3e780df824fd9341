"""The constants of sft's f64 functions, computed from their definitions with mpmath (no table
copied from a libm): split constants whose leading parts multiply integers exactly, Taylor
coefficients, the bits of 2/pi for large-argument reduction, and Chebyshev fits for erf."""

from __future__ import annotations

from functools import cache

import mpmath


def _precise(fn):
    """`fn` computed at 60 digits, mpmath's global precision left as it was (sympy shares it)."""
    def wrapped(*args):
        with mpmath.workdps(60):
            return fn(*args)
    return cache(wrapped)


def _truncate(value, bits: int) -> float:
    """`value` cut to `bits` significant bits (towards zero), as a float."""
    if value == 0:
        return 0.0
    exponent = int(mpmath.floor(mpmath.log(abs(value), 2)))
    scale = mpmath.mpf(2) ** (bits - 1 - exponent)
    return float(mpmath.floor(abs(value) * scale) / scale) * (1 if value > 0 else -1)


def split(value, bits: int, parts: int) -> tuple[float, ...]:
    """`value` as `parts` floats of `bits` significant bits each, the last rounded to 53: a
    multiple `k * part` is exact while k has at most 53 - bits bits."""
    out, rest = [], mpmath.mpf(value)
    for _ in range(parts - 1):
        out.append(_truncate(rest, bits))
        rest -= out[-1]
    out.append(float(rest))
    return tuple(out)


def hi_lo(value) -> tuple[float, float]:
    """`value` as a rounded float and the float nearest to what it left out."""
    hi = float(value)
    return hi, float(mpmath.mpf(value) - hi)


@_precise
def exp_taylor() -> tuple[float, ...]:
    """1/n! for n = 2..14: exp(r) = 1 + r + r^2 * sum(c[i] r^i) on |r| <= ln2/2, the first term
    left out below 2^-60."""
    return tuple(float(1 / mpmath.factorial(n)) for n in range(2, 15))


@_precise
def tanh_taylor() -> tuple[float, ...]:
    """tanh's Taylor coefficients of x^3, x^5, ..., x^43: tanh(x) = x + x^3 * sum(c[i] x^2i) on
    |x| < 0.55, the first term left out below 2^-60 there."""
    return tuple(float(2 ** (2 * n) * (2 ** (2 * n) - 1) * mpmath.bernoulli(2 * n) / mpmath.factorial(2 * n))
                 for n in range(2, 23))


@_precise
def sin_taylor() -> tuple[float, ...]:
    """(-1)^n/(2n+1)! for n = 1..10: sin(r) = r + r^3 * sum(c[i] r^2i) on |r| <= pi/4."""
    return tuple(float((-1) ** n / mpmath.factorial(2 * n + 1)) for n in range(1, 11))


@_precise
def cos_taylor() -> tuple[float, ...]:
    """(-1)^n/(2n)! for n = 2..10: cos(r) = 1 - r^2/2 + r^4 * sum(c[i] r^2i) on |r| <= pi/4."""
    return tuple(float((-1) ** n / mpmath.factorial(2 * n)) for n in range(2, 11))


@_precise
def atan_taylor() -> tuple[float, ...]:
    """(-1)^n/(2n+1) for n = 1..27: atan(t) = t + t^3 * sum(c[i] t^2i) on |t| <= 7/16."""
    return tuple(float(mpmath.mpf((-1) ** n) / (2 * n + 1)) for n in range(1, 28))


@_precise
def erf_taylor() -> tuple[float, ...]:
    """2/sqrt(pi) (-1)^n / (n! (2n+1)) for n = 0..18, the first less 1: erf(x) = x + x * sum(c[i]
    x^2i) on |x| < 0.84375."""
    c = [2 / mpmath.sqrt(mpmath.pi) * (-1) ** n / (mpmath.factorial(n) * (2 * n + 1)) for n in range(19)]
    c[0] -= 1
    return tuple(float(v) for v in c)


# erf on [0.84375, 6): erf(a) = 1 - exp(-a^2) R(a), R(a) = erfc(a) exp(a^2) fitted per interval
# as a polynomial in a - middle.
ERF_INTERVALS = ((0.84375, 1.5), (1.5, 2.5), (2.5, 3.75), (3.75, 6.0))
ERF_DEGREE = 22


@_precise
def erfc_scaled_fits() -> tuple[tuple[float, tuple[float, ...]], ...]:
    """(middle, coefficients low to high) per interval of ERF_INTERVALS."""
    fits = []
    for lo, hi in ERF_INTERVALS:
        middle = (lo + hi) / 2
        half = (hi - lo) / 2
        f = lambda t: mpmath.erfc(middle + t) * mpmath.exp((middle + t) ** 2)  # noqa: E731
        coefficients = mpmath.chebyfit(f, [-half, half], ERF_DEGREE + 1)
        fits.append((middle, tuple(float(c) for c in reversed(coefficients))))
    return tuple(fits)


@_precise
def pi_parts() -> dict[str, tuple[float, ...]]:
    pi = mpmath.pi
    return {
        "pio2": split(pi / 2, 33, 4),      # k * part exact for k < 2^20
        "pio2_hl": hi_lo(pi / 2),
        "pi_hl": hi_lo(pi),
        "pio4_hl": hi_lo(pi / 4),
        "ln2": split(mpmath.log(2), 42, 2),  # k * ln2[0] exact for |k| < 2^11
        "atan_half": hi_lo(mpmath.atan(0.5)),
        "atan_one": hi_lo(mpmath.atan(1)),
        "atan_threehalves": hi_lo(mpmath.atan(1.5)),
        "atan_inf": hi_lo(pi / 2),
        "three_pio4_hl": hi_lo(3 * pi / 4),
    }


CHUNK_BITS = 24
CHUNKS = 48  # 1152 bits of 2/pi: enough for the largest double's exponent and 76 bits more
CHUNK_SCALE = 600  # the chunks are stored times 2^600 (the last would be below 2^-1074)


@_precise
def two_over_pi_chunks() -> tuple[float, ...]:
    """2/pi = sum(chunks) / 2^CHUNK_SCALE, chunk j holding bits 24j+1 .. 24j+24 after the
    binary point."""
    with mpmath.workdps(450):
        rest = 2 / mpmath.pi
        out = []
        for j in range(CHUNKS):
            scale = mpmath.mpf(2) ** (CHUNK_BITS * (j + 1))
            whole = mpmath.floor(rest * scale)
            out.append(float(whole / scale * 2 ** CHUNK_SCALE))
            rest -= whole / scale
    return tuple(out)
