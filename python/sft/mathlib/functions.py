"""f64 elementary functions from +, -, *, /, comparisons, selections and bit operations only.

IREE's CPU executables link no libm, and its polynomial approximations are f32 only, so f64
`tanh`, `sin`, `cos`, `atan`, `atan2` and `erf` do not compile there. These implement them on
an arithmetic `A` (the MLIR emitter of passes/f64_math.py, or numpy arrays for the accuracy
tests), branch-free: every path is computed and the right one selected, as vector code does.

`A` provides Python's + - * / and unary - on its values, Python floats and ints mixing in, and:
`select(c, a, b)`, `lt/le/eq/ne(a, b)` (ordered: false on NaN), `and_/or_(c, d)`, `bits(x)` and
`float_of_bits(i)` (f64 <-> i64, the same bits), `to_int(x)` (f64 -> i64, truncating; callers
keep x in range), `to_float(i)`, `shl/shr(i, n)` (shr arithmetic), `band/bor(i, j)`.

Accuracy, against the C library's on 10^6 inputs (test/python/test_f64_math.py): within 1 ulp,
tanh within 2. The limit: `sin`/`cos` of an argument beyond 2^20 pi/2 keep about 100 bits of
it modulo pi/2, so one within 2^-47 of a multiple of pi/2 (none among ordinary inputs) loses
accuracy. IREE's CPU code flushes subnormals to zero, inputs and results.
"""

from __future__ import annotations

from . import constants as C

MAGIC = 1.5 * 2.0 ** 52  # x + MAGIC - MAGIC rounds |x| < 2^51 to an integer, ties to even
SIGN = -(2 ** 63)        # the sign bit as an i64
MEDIUM = 1647099.0       # about 2^20 pi/2: below it, k * pio2[0] is exact (k < 2^20)


# ---- exact pieces ----

def round_int(x):
    return (x + MAGIC) - MAGIC


def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):  # |a| >= |b|
    s = a + b
    return s, b - (s - a)


def split(a):  # Veltkamp: a = hi + lo, 26 bits each (|a| < 2^996)
    c = 134217729.0 * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def horner(x, coefficients):
    acc = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        acc = acc * x + c
    return acc


def pow2(A, k):
    """2^k for an i64 k in [-1022, 1023]."""
    return A.float_of_bits(A.shl(k + 1023, 52))


def absolute(A, x):
    return A.float_of_bits(A.band(A.bits(x), ~SIGN))


def copysign(A, magnitude, sign):
    """`magnitude` (>= 0 or +0) with the sign bit of `sign`."""
    return A.float_of_bits(A.bor(A.bits(magnitude), A.band(A.bits(sign), SIGN)))


def is_nan(A, x):
    return A.ne(x, x)


def clamp(A, x, lo, hi):  # NaN becomes lo
    return A.select(A.lt(x, hi), A.select(A.lt(lo, x), x, lo), hi)


# ---- exp and expm1: x = k ln2 + r, |r| <= ln2/2 ----

def _reduce_ln2(A, x):
    """(k as f64, r, c) with x = k ln2 + r + c, for |x| < 2^10 ln2 * 1.1."""
    ln2_hi, ln2_lo = C.pi_parts()["ln2"]
    k = round_int(x * (1 / 0.6931471805599453))
    hi = x - k * ln2_hi  # exact: ln2_hi has 42 bits, |k| < 2^11, and hi is a cancellation
    lo = k * ln2_lo
    r = hi - lo
    return k, r, (hi - r) - lo


def _exp_tail(r, c):
    """exp(r + c) - 1 for |r| <= ln2/2, c a correction below ulp(r)."""
    return r + (r * r * horner(r, C.exp_taylor()) + c)


def exp(A, x):
    xc = clamp(A, x, -746.0, 710.0)
    k, r, c = _reduce_ln2(A, xc)
    y = 1.0 + _exp_tail(r, c)
    ki = A.to_int(k)
    k1 = A.shr(ki, 1)  # two factors, each a normal power of two; the second rounds once
    return A.select(is_nan(A, x), x, y * pow2(A, k1) * pow2(A, ki - k1))


def expm1(A, x):
    """exp(x) - 1 for x in [-700, 700] (tanh's range)."""
    k, r, c = _reduce_ln2(A, x)
    s = pow2(A, A.to_int(k))
    return (s - 1.0) + s * _exp_tail(r, c)


# ---- tanh ----

def tanh(A, x):
    a = absolute(A, x)
    a2 = a * a
    small = a + a * a2 * horner(a2, C.tanh_taylor())      # a < 0.55: its Taylor series
    big = expm1(A, 2.0 * clamp(A, a, 0.0, 22.0))
    big = 1.0 - 2.0 / (big + 2.0)                         # else 1 - 2 / (e^2a + 1)
    z = A.select(A.lt(a, 0.55), small, big)
    z = A.select(A.lt(a, 22.0), z, 1.0)
    return A.select(is_nan(A, x), x, copysign(A, z, x))


# ---- sin and cos: a = |x| = n pi/2 + r, |r| <= pi/4, r as rh + rl ----

def _reduce_medium(A, a):
    """For a < MEDIUM: (n as f64, rh, rl) by Cody and Waite's reduction in four parts."""
    p1, p2, p3, p4 = C.pi_parts()["pio2"]
    n = round_int(a * (2 / 3.141592653589793))
    y = a - n * p1                   # exact: n < 2^20, p1 has 33 bits, a cancellation
    h, l = two_sum(y, -(n * p2))     # n * p2 and n * p3 exact too
    l = (l - n * p3) - n * p4
    rh, rl = fast_two_sum(h, l)
    return n, rh, rl


def _mod8(A, p):
    """p mod 8 for p >= 0, exact (p and 8 floor(p/8) are); 0 from 2^55 on, where ulp(p) >= 8."""
    q = p * 0.125
    representable = A.lt(q, 2.0 ** 52)
    f = (A.select(representable, q, 0.0) + 2.0 ** 52) - 2.0 ** 52  # rounds q >= 0 to an integer
    f = A.select(A.lt(q, f), f - 1.0, f)  # floor
    return A.select(representable, p - 8.0 * f, 0.0)


def _reduce_large(A, a):
    """For MEDIUM <= a < inf: (n as f64, rh, rl) by Payne and Hanek's reduction: a * 2/pi mod 8
    summed exactly per product of a's halves with 24-bit chunks of 2/pi, in double-double."""
    a = A.select(A.and_(A.le(MEDIUM, a), A.lt(a, float("inf"))), a, MEDIUM) * 2.0 ** -C.CHUNK_SCALE
    ah = A.float_of_bits(A.band(A.bits(a), ~(2 ** 27 - 1)))  # 26 bits of mantissa
    al = a - ah
    sh, sl = 0.0, 0.0
    for chunk in C.two_over_pi_chunks():  # scaled up as a is down: no chunk is subnormal
        for half in (ah, al):
            term = _mod8(A, half * chunk)  # exact product: 27 + 24 bits
            sh, e = two_sum(sh, term)
            sl = sl + e
        # keep the running sum below 8 (integers: exact)
        whole = 8.0 * round_int(A.select(A.lt(sh, 2.0 ** 51), sh * 0.125, 0.0) - 0.5)
        sh = sh - whole
        sh, sl = fast_two_sum(sh, sl)
    n = round_int(sh)
    fh, fl = fast_two_sum(sh - n, sl)
    pio2_hi, pio2_lo = C.pi_parts()["pio2_hl"]
    rh, rl = two_prod(fh, pio2_hi)
    rl = rl + (fh * pio2_lo + fl * pio2_hi)
    rh, rl = fast_two_sum(rh, rl)
    return n, rh, rl


def _sin_kernel(rh, rl):
    r2 = rh * rh
    return rh + (rh * r2 * horner(r2, C.sin_taylor()) + rl * (1.0 - 0.5 * r2))


def _cos_kernel(rh, rl):
    r2 = rh * rh
    half = 0.5 * r2
    w = 1.0 - half
    return w + (((1.0 - w) - half) + (r2 * r2 * horner(r2, C.cos_taylor()) - rh * rl))


def _reduce(A, x):
    """(n mod 4 as i64, rh, rl) with |x| = n pi/2 + rh + rl."""
    a = absolute(A, x)
    medium = A.lt(a, MEDIUM)
    n1, rh1, rl1 = _reduce_medium(A, A.select(medium, a, 0.0))
    n2, rh2, rl2 = _reduce_large(A, a)
    quadrant = A.band(A.to_int(A.select(medium, n1, n2)), 3)
    return quadrant, A.select(medium, rh1, rh2), A.select(medium, rl1, rl2)


def _quadrant_select(A, q, values):
    v0, v1, v2, v3 = values
    return A.select(A.eq(q, 0), v0, A.select(A.eq(q, 1), v1, A.select(A.eq(q, 2), v2, v3)))


def sin(A, x):
    q, rh, rl = _reduce(A, x)
    s, c = _sin_kernel(rh, rl), _cos_kernel(rh, rl)
    y = _quadrant_select(A, q, (s, c, -s, -c))
    y = A.select(A.lt(x, 0.0), -y, A.select(A.eq(x, 0.0), x, y))  # odd; keeps -0
    return A.select(A.lt(absolute(A, x), float("inf")), y, x - x)  # inf, NaN -> NaN


def cos(A, x):
    q, rh, rl = _reduce(A, x)
    s, c = _sin_kernel(rh, rl), _cos_kernel(rh, rl)
    y = _quadrant_select(A, q, (c, -s, -c, s))
    return A.select(A.lt(absolute(A, x), float("inf")), y, x - x)


# ---- atan and atan2 ----

def _atan_kernel(t):
    """atan(t) for |t| <= 7/16."""
    t2 = t * t
    return t + t * t2 * horner(t2, C.atan_taylor())


def atan(A, x):
    a = absolute(A, x)
    parts = C.pi_parts()
    # atan(a) = atan(c) + atan((a - c) / (1 + a c)), c in {1/2, 1, 3/2, inf} by the range of a;
    # the branches not taken may divide inf by inf: their NaNs are never selected
    hi, lo = parts["atan_inf"]
    y = hi + (lo + _atan_kernel(-1.0 / a))
    for bound, (c_hi, c_lo), reduced in (
            (39 / 16, parts["atan_threehalves"], (a - 1.5) / (1.0 + 1.5 * a)),
            (19 / 16, parts["atan_one"], (a - 1.0) / (a + 1.0)),
            (11 / 16, parts["atan_half"], (2.0 * a - 1.0) / (2.0 + a))):
        y = A.select(A.lt(a, bound), c_hi + (c_lo + _atan_kernel(reduced)), y)
    y = A.select(A.lt(a, 7 / 16), _atan_kernel(a), y)
    return A.select(is_nan(A, x), x, copysign(A, y, x))


def atan2(A, y, x):
    """The angle of (x, y), with C99's signed zeros and infinities."""
    ay, ax = absolute(A, y), absolute(A, x)
    pi_hi, pi_lo = C.pi_parts()["pi_hl"]
    pio2_hi, _ = C.pi_parts()["pio2_hl"]
    pio4_hi, _ = C.pi_parts()["pio4_hl"]
    three_pio4, _ = C.pi_parts()["three_pio4_hl"]
    x_negative = A.lt(A.bits(x), 0)  # the sign bit: -0 counts as negative
    z = atan(A, ay / ax)  # inf/inf and 0/0 are NaN: their cases are selected below
    angle = A.select(x_negative, pi_hi - (z - pi_lo), z)
    both_inf = A.and_(A.eq(ay, float("inf")), A.eq(ax, float("inf")))
    angle = A.select(both_inf, A.select(x_negative, three_pio4, pio4_hi), angle)
    angle = A.select(A.and_(A.eq(ay, float("inf")), A.lt(ax, float("inf"))), pio2_hi, angle)
    angle = A.select(A.and_(A.eq(ax, 0.0), A.lt(0.0, ay)), pio2_hi, angle)
    angle = A.select(A.eq(ay, 0.0), A.select(x_negative, pi_hi, 0.0), angle)
    angle = A.select(A.and_(A.eq(ax, float("inf")), A.lt(ay, float("inf"))),
                     A.select(x_negative, pi_hi, 0.0), angle)
    angle = copysign(A, angle, y)
    return A.select(A.or_(is_nan(A, x), is_nan(A, y)), x + y, angle)


# ---- erf ----

def erf(A, x):
    a = absolute(A, x)
    small = a + a * horner(a * a, C.erf_taylor())
    big = 1.0
    e = exp(A, -(a * a))
    for (lo, hi), (middle, coefficients) in zip(C.ERF_INTERVALS, C.erfc_scaled_fits()):
        in_range = A.and_(A.le(lo, a), A.lt(a, hi))
        big = A.select(in_range, 1.0 - e * horner(a - middle, coefficients), big)
    y = A.select(A.lt(a, C.ERF_INTERVALS[0][0]), small, big)
    return A.select(is_nan(A, x), x, copysign(A, y, x))


FUNCTIONS = {"tanh": (tanh, 1), "sin": (sin, 1), "cos": (cos, 1), "atan": (atan, 1),
             "atan2": (atan2, 2), "erf": (erf, 1)}
