"""The conformance suite's modules: small torch programs over every op family torch-mlir lowers
to linalg-on-tensors, built from tables (op x dtype x shape) wrapped in one generic module, plus
real module classes (nn.Conv2d, nn.LayerNorm, ...).

A case is an id, a builder for the module and a builder for its inputs; both are seeded, so a
case is the same program on the same numbers in every process (pytest-xdist workers included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
i8, i32, i64, u8, b1 = torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool
SHORT = {f16: "f16", bf16: "bf16", f32: "f32", f64: "f64", i8: "i8", i32: "i32", i64: "i64",
         u8: "u8", b1: "bool"}


class Fn(nn.Module):
    """Applies a function to its inputs: one module class for every table-built case."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], nn.Module]
    make_inputs: Callable[[], tuple]
    mutated: tuple[int, ...] = ()  # inputs the module updates in place (torch.export returns them first)
    rtol: float | None = None      # None: the dtype's default (test_conformance.TOLERANCE)
    atol: float | None = None

    def module(self) -> nn.Module:
        torch.manual_seed(0)
        return self.build().eval()

    def inputs(self) -> tuple:
        torch.manual_seed(1)
        return tuple(self.make_inputs())


CASES: dict[str, Case] = {}


def case(id: str, fn: Callable, inputs: Callable[[], tuple], **kw) -> None:
    """A case applying `fn` (through `Fn`)."""
    module(id, lambda: Fn(fn), inputs, **kw)


def module(id: str, build: Callable[[], nn.Module], inputs: Callable[[], tuple], **kw) -> None:
    assert id not in CASES, id
    CASES[id] = Case(id, build, inputs, **kw)


# ---- input makers (called under a fixed seed) ----

def rnd(*shape, dtype=f32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


def pos(*shape, dtype=f32):  # for log, sqrt, pow, reciprocal: away from 0
    return (torch.rand(*shape) * 2 + 0.25).to(dtype)


def ints(*shape, lo=-9, hi=10, dtype=i64):
    return torch.randint(lo, hi, shape).to(dtype)


def nonzero(*shape, lo=-9, hi=10, dtype=i64):  # divisors
    x = torch.randint(lo, hi, shape)
    return torch.where(x == 0, 3, x).to(dtype)


def bools(*shape):
    return torch.rand(*shape) > 0.5


def perm_index(rows, n, k):  # k distinct indices in [0, n) per row: scatter without collisions
    return torch.stack([torch.randperm(n)[:k] for _ in range(rows)])


# ---- elementwise math ----

UNARY = {
    "neg": (torch.neg, rnd), "abs": (torch.abs, rnd), "exp": (torch.exp, rnd),
    "expm1": (torch.expm1, rnd), "log": (torch.log, pos),
    "log1p": (torch.log1p, pos), "sqrt": (torch.sqrt, pos),
    "rsqrt": (torch.rsqrt, pos), "reciprocal": (torch.reciprocal, pos), "sin": (torch.sin, rnd),
    "cos": (torch.cos, rnd), "asin": (lambda x: torch.asin(x.clamp(-0.9, 0.9)), rnd),
    "atan": (torch.atan, rnd), "sinh": (torch.sinh, rnd), "erf": (torch.erf, rnd),
    "floor": (torch.floor, lambda *s, dtype=f32: rnd(*s, dtype=dtype, scale=3)),
    "ceil": (torch.ceil, lambda *s, dtype=f32: rnd(*s, dtype=dtype, scale=3)),
    "trunc": (torch.trunc, lambda *s, dtype=f32: rnd(*s, dtype=dtype, scale=3)),
    "sign": (torch.sign, rnd), "pow-half": (lambda x: x ** 0.5, pos),
}
for name, (fn, gen) in UNARY.items():
    case(f"unary-{name}-f32", fn, lambda gen=gen: (gen(3, 4),))
for name in ("neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "atan", "erf", "floor", "sign",
             "pow-half"):
    fn, gen = UNARY[name]
    case(f"unary-{name}-f64", fn, lambda gen=gen: (gen(3, 4, dtype=f64),))
for name in ("neg", "exp", "sqrt", "floor"):
    fn, gen = UNARY[name]
    for dt in (f16, bf16):
        case(f"unary-{name}-{SHORT[dt]}", fn, lambda gen=gen, dt=dt: (gen(3, 4, dtype=dt),))
# round is half-to-even in PyTorch: exact halves on purpose
case("unary-round-halves-f32", torch.round,
     lambda: (torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7]),))
case("unary-round-decimals-f32", lambda x: torch.round(x, decimals=2), lambda: (rnd(3, 4),))
case("unary-isnan-f32", lambda x: torch.isnan(x / x), lambda: (torch.tensor([0.0, 1.0, -2.0]),))
case("unary-nan-to-num-f32", torch.nan_to_num,
     lambda: (torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0]),))

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b), "hypot": torch.hypot,
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
}
for name, fn in BINARY.items():
    for dt in (f32, f64) if name in ("add", "div", "maximum", "pow", "atan2") else (f32,):
        case(f"binary-{name}-{SHORT[dt]}", fn, lambda dt=dt: (rnd(3, 4, dtype=dt), rnd(3, 4, dtype=dt)))
for name in ("add", "mul", "div"):
    for dt in (f16, bf16):
        case(f"binary-{name}-{SHORT[dt]}", BINARY[name], lambda dt=dt: (rnd(3, 4, dtype=dt), rnd(3, 4, dtype=dt)))
case("binary-add-broadcast-f32", torch.add, lambda: (rnd(2, 1, 4), rnd(3, 1)))
case("binary-maximum-nan-f32", torch.maximum, lambda: (torch.tensor([float("nan"), 1.0, 2.0]), torch.tensor([0.0, float("nan"), 1.0])))
case("binary-addcmul-f32", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), lambda: (rnd(3, 4), rnd(3, 4), rnd(4)))

# Integer division and remainder: PyTorch rounds floor or toward zero on request, `//` floors,
# `%` takes the divisor's sign (Python's), fmod the dividend's. Negatives on both sides.
IDIV = {
    "div-floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div-trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div-true": torch.div,
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "fmod": torch.fmod,
    "remainder": torch.remainder,
}
IDIV_DTYPES = {"div-floor": (i64, i32, i8, f32), "div-trunc": (i64, i32, f32), "mod": (i64, i32, i8, f32)}
for name, fn in IDIV.items():
    for dt in IDIV_DTYPES.get(name, (i64, f32)):
        case(f"idiv-{name}-{SHORT[dt]}", fn, lambda dt=dt: (ints(3, 4, lo=-20, hi=21, dtype=dt), nonzero(3, 4, lo=-6, hi=7, dtype=dt)))
for name, fn in {"floordiv-scalar": lambda a: a // 3, "mod-neg-scalar": lambda a: a % -3,
                 "div-floor-scalar": lambda a: torch.div(a, -2, rounding_mode="floor"),
                 "div-trunc-scalar": lambda a: torch.div(a, 4, rounding_mode="trunc"),
                 "fmod-scalar": lambda a: torch.fmod(a, -3)}.items():
    for dt in (i64, f32):
        case(f"idiv-{name}-{SHORT[dt]}", fn, lambda dt=dt: (ints(3, 4, lo=-20, hi=21, dtype=dt),))

# Type promotion with Python scalars and 0-d tensors (which do not promote within a category).
PROMOTE = {
    "i64-plus-float": (lambda a: a + 2.5, lambda: (ints(3, 4),)),
    "i32-times-int": (lambda a: a * 3, lambda: (ints(3, 4, dtype=i32),)),
    "i8-times-int": (lambda a: a * 3, lambda: (ints(3, 4, dtype=i8),)),
    "i64-truediv-int": (lambda a: a / 2, lambda: (ints(3, 4),)),
    "i32-plus-i64": (torch.add, lambda: (ints(3, 4, dtype=i32), ints(3, 4))),
    "i8-plus-i64-0d": (torch.add, lambda: (ints(3, 4, dtype=i8), torch.tensor(5))),
    "bool-plus-int": (lambda a: a + 1, lambda: (bools(3, 4),)),
    "bool-times-float": (lambda a: a * 1.5, lambda: (bools(3, 4),)),
    "f16-plus-f32-0d": (torch.add, lambda: (rnd(3, 4, dtype=f16), torch.tensor(0.5))),
    "f32-plus-f64": (torch.add, lambda: (rnd(3, 4), rnd(3, 4, dtype=f64))),
    "i32-plus-f16": (torch.add, lambda: (ints(3, 4, dtype=i32), rnd(3, 4, dtype=f16))),
    "i64-plus-f64-0d": (torch.add, lambda: (ints(3, 4), torch.tensor(0.25, dtype=f64))),
    "f32-rsub-int": (lambda a: 2 - a, lambda: (rnd(3, 4),)),
    "i64-pow-int": (lambda a: a ** 2, lambda: (ints(3, 4),)),
    "int-pow-tensor": (lambda a: 2 ** a, lambda: (ints(3, 4, lo=0, hi=8),)),
    "bool-and-int": (lambda a, b: a & b, lambda: (bools(3, 4), ints(3, 4, dtype=i32))),
}
for name, (fn, gen) in PROMOTE.items():
    case(f"promote-{name}", fn, gen)

# Comparisons (bool results), with tensors and with Python scalars of the other kind.
for name, fn in {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "ge": torch.ge}.items():
    case(f"cmp-{name}-f32", fn, lambda: (rnd(3, 4).round(), rnd(3, 4).round()))
    if name in ("eq", "lt"):
        case(f"cmp-{name}-i32", fn, lambda: (ints(3, 4, lo=-3, hi=4, dtype=i32), ints(3, 4, lo=-3, hi=4, dtype=i32)))
case("cmp-gt-float-scalar-i64", lambda a: a > 0.5, lambda: (ints(3, 4),))
case("cmp-eq-int-scalar-f32", lambda a: a == 1, lambda: (rnd(3, 4).round(),))
case("cmp-isclose-f32", lambda a, b: torch.isclose(a, b, rtol=0.1), lambda: (rnd(3, 4), rnd(3, 4)))

# where / clamp
case("where-f32", torch.where, lambda: (bools(3, 4), rnd(3, 4), rnd(3, 4)))
case("where-scalar-f32", lambda c, a: torch.where(c, a, 0.0), lambda: (bools(3, 4), rnd(3, 4)))
case("where-int-scalars", lambda c: torch.where(c, 2, -1), lambda: (bools(3, 4),))
case("where-broadcast-i64", torch.where, lambda: (bools(3, 1), ints(1, 4), ints(3, 4)))
case("where-mixed-dtypes", torch.where, lambda: (bools(3, 4), ints(3, 4, dtype=i32), rnd(3, 4)))
case("clamp-f32", lambda a: torch.clamp(a, -0.5, 0.5), lambda: (rnd(3, 4),))
case("clamp-min-f32", lambda a: torch.clamp(a, min=0.1), lambda: (rnd(3, 4),))
case("clamp-max-f64", lambda a: torch.clamp(a, max=-0.1), lambda: (rnd(3, 4, dtype=f64),))
case("clamp-i64", lambda a: torch.clamp(a, -3, 4), lambda: (ints(3, 4),))
case("clamp-i8-float-bounds", lambda a: torch.clamp(a, -2.5, 3.5), lambda: (ints(3, 4, dtype=i8),))
case("clamp-tensor-bounds-f32", torch.clamp, lambda: (rnd(3, 4), rnd(3, 4) - 1, rnd(3, 4) + 1))

# bitwise on ints and bool (on bool: logical)
BITWISE = {"and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor}
for name, fn in BITWISE.items():
    for dt in {"and": (i64, i8), "or": (i64,), "xor": (i64, i32)}[name]:
        case(f"bitwise-{name}-{SHORT[dt]}", fn, lambda dt=dt: (ints(3, 4, lo=-100, hi=100, dtype=dt), ints(3, 4, lo=-100, hi=100, dtype=dt)))
    case(f"bitwise-{name}-bool", fn, lambda: (bools(3, 4), bools(3, 4)))
for dt in (i64, i32, i8, b1):
    case(f"bitwise-not-{SHORT[dt]}", torch.bitwise_not,
         lambda dt=dt: (bools(3, 4) if dt == b1 else ints(3, 4, lo=-100, hi=100, dtype=dt),))
case("bitwise-lshift-i32", lambda a, b: a << b, lambda: (ints(3, 4, lo=-50, hi=50, dtype=i32), ints(3, 4, lo=0, hi=6, dtype=i32)))
case("bitwise-rshift-neg-i64", lambda a: a >> 2, lambda: (ints(3, 4, lo=-50, hi=50),))
case("bitwise-and-scalar-i64", lambda a: a & 6, lambda: (ints(3, 4, lo=-50, hi=50),))
case("logical-and-f32", torch.logical_and, lambda: (rnd(3, 4).round(), rnd(3, 4).round()))
case("logical-not-i64", torch.logical_not, lambda: (ints(3, 4, lo=-1, hi=2),))
case("logical-xor-bool", torch.logical_xor, lambda: (bools(3, 4), bools(3, 4)))

# ---- reductions ----

X3 = lambda dt=f32: (rnd(3, 4, 5, dtype=dt),)  # noqa: E731
REDUCE = {
    "sum-all": lambda x: x.sum(), "sum-neg1": lambda x: x.sum(-1),
    "sum-02": lambda x: x.sum((0, 2)), "sum-keepdim": lambda x: x.sum(-2, keepdim=True),
    "mean-neg1": lambda x: x.mean(-1),
    "mean-keepdim": lambda x: x.mean((0, -1), keepdim=True),
    "var-c0": lambda x: x.var(-1, correction=0), "var-c1": lambda x: x.var(-1),
    "var-c2-keepdim": lambda x: x.var((0, 1), correction=2, keepdim=True),
    "std-c1": lambda x: x.std(1), 
    "var-mean": lambda x: torch.var_mean(x, dim=-1, correction=0),
    "norm-2": lambda x: torch.linalg.vector_norm(x, 2, dim=-1),
    "norm-1": lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2)),
    "norm-inf": lambda x: torch.linalg.vector_norm(x, float("inf"), dim=-1),
    "norm-3-keepdim": lambda x: torch.linalg.vector_norm(x, 3, dim=1, keepdim=True),
    "norm-fro": lambda x: torch.norm(x), "matrix-norm-fro": lambda x: torch.linalg.matrix_norm(x),
    "max-all": lambda x: x.max(),
    "max-dim": lambda x: x.max(dim=-1), "min-dim-keepdim": lambda x: x.min(dim=0, keepdim=True),
    "amax": lambda x: torch.amax(x, dim=(0, -1)), "amin-keepdim": lambda x: torch.amin(x, -2, keepdim=True),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "argmax-neg1": lambda x: x.argmax(-1), "argmax-all": lambda x: x.argmax(),
    "argmin-neg2-keepdim": lambda x: x.argmin(-2, keepdim=True),
    "prod-all": lambda x: x.prod(), "prod-1": lambda x: x.prod(1),
    "logsumexp": lambda x: torch.logsumexp(x, -1), "logsumexp-01": lambda x: torch.logsumexp(x, (0, 1)),
}
for name, fn in REDUCE.items():
    case(f"reduce-{name}-f32", fn, X3)
for name in ("sum-all", "var-c1", "max-dim", "prod-1", "logsumexp"):
    case(f"reduce-{name}-f64", REDUCE[name], lambda: X3(f64))
for name in ("sum-neg1", "amax", "argmax-neg1"):
    for dt in (f16, bf16):
        case(f"reduce-{name}-{SHORT[dt]}", REDUCE[name], lambda dt=dt: X3(dt))
# integer and bool reductions: sum and prod promote to int64
for dt in (i64, i32, i8, b1):
    gen = (lambda: (bools(3, 4, 5),)) if dt == b1 else (lambda dt=dt: (ints(3, 4, 5, lo=-5, hi=6, dtype=dt),))
    case(f"reduce-sum-neg1-{SHORT[dt]}", lambda x: x.sum(-1), gen)
    case(f"reduce-max-dim-{SHORT[dt]}", lambda x: x.max(dim=1), gen)
    if dt != b1:  # argmin has no bool kernel in PyTorch
        case(f"reduce-argmin-0-{SHORT[dt]}", lambda x: x.argmin(0), gen)
case("reduce-prod-1-i64", lambda x: x.prod(1), lambda: (ints(3, 4, 5, lo=-3, hi=4),))
case("reduce-sum-dtype-f64", lambda x: x.sum(-1, dtype=f64), X3)
case("reduce-any-bool", lambda x: x.any(-1), lambda: (bools(3, 4, 5),))
case("reduce-all-bool", lambda x: x.all(), lambda: (bools(3, 4, 5),))
case("reduce-any-f32", lambda x: x.any(0), lambda: (rnd(3, 4).round(),))
case("reduce-count-nonzero", lambda x: torch.count_nonzero(x, dim=-1), lambda: (ints(3, 4, 5, lo=-1, hi=2),))
# 0-d inputs: a dim of 0 or -1 names the one (virtual) dim
X0 = lambda: (torch.tensor(1.5),)  # noqa: E731
for name, fn in {"sum": lambda x: x.sum(), "sum-dim0": lambda x: x.sum(0), "mean-neg1": lambda x: x.mean(-1),
                 "max": lambda x: x.max(), "argmax": lambda x: x.argmax(), "amax-0": lambda x: torch.amax(x, 0),
                 "logsumexp": lambda x: torch.logsumexp(x, 0), "prod": lambda x: x.prod()}.items():
    case(f"reduce0d-{name}", fn, X0)
# empty tensors: the identity of the reduction (nan for the mean), empty results keep their shape
XE = lambda: (torch.empty(0, 4),)  # noqa: E731
for name, fn in {"sum-all": lambda x: x.sum(), "sum-0": lambda x: x.sum(0), "sum-1": lambda x: x.sum(1),
                 "prod-0": lambda x: x.prod(0), "mean-0": lambda x: x.mean(0), "amax-1": lambda x: x.amax(1),
                 "any-0": lambda x: x.any(0)}.items():
    case(f"reduce-empty-{name}", fn, XE)
case("reduce-empty-sum-i64", lambda x: x.sum(0), lambda: (torch.empty(0, 3, dtype=i64),))

# ---- indexing ----

case("gather-1", lambda x, i: torch.gather(x, 1, i), lambda: (rnd(3, 4), ints(3, 2, lo=0, hi=4)))
case("gather-0", lambda x, i: torch.gather(x, 0, i), lambda: (rnd(3, 4), ints(2, 4, lo=0, hi=3)))
case("gather-neg1-i32", lambda x, i: torch.gather(x, -1, i), lambda: (ints(2, 3, 4, dtype=i32), ints(2, 3, 2, lo=0, hi=4)))
case("take-along-dim", lambda x, i: torch.take_along_dim(x, i, dim=1), lambda: (rnd(3, 4), ints(3, 2, lo=0, hi=4)))
case("scatter-src", lambda x, i, s: x.scatter(1, i, s), lambda: (rnd(3, 4), perm_index(3, 4, 2), rnd(3, 2)))
case("scatter-value", lambda x, i: x.scatter(1, i, 2.5), lambda: (rnd(3, 4), perm_index(3, 4, 2)))
case("scatter-0-i64", lambda x, i, s: x.scatter(0, i, s), lambda: (ints(4, 3), perm_index(3, 4, 2).T.contiguous(), ints(2, 3)))
case("scatter-add", lambda x, i, s: x.scatter_add(1, i, s), lambda: (rnd(3, 4), ints(3, 5, lo=0, hi=4), rnd(3, 5)))
for red in ("sum", "prod", "amax", "amin", "mean"):
    for self_ in (True, False):
        case(f"scatter-reduce-{red}-{'self' if self_ else 'noself'}",
             lambda x, i, s, red=red, self_=self_: x.scatter_reduce(1, i, s, red, include_self=self_),
             lambda: (rnd(3, 4), ints(3, 5, lo=0, hi=4), rnd(3, 5)))
case("index-put", lambda x, i, v: torch.index_put(x, (i,), v), lambda: (rnd(5, 3), torch.tensor([3, 0]), rnd(2, 3)))
case("index-put-acc", lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
     lambda: (rnd(5, 3), torch.tensor([1, 3, 1]), rnd(3, 3)))
case("index-put-2d", lambda x, i, j, v: torch.index_put(x, (i, j), v), lambda: (rnd(4, 5), torch.tensor([0, 2, 3]), torch.tensor([4, 1, 0]), rnd(3)))
case("index-put-2d-acc-i64", lambda x, i, j, v: torch.index_put(x, (i, j), v, accumulate=True),
     lambda: (ints(4, 5), torch.tensor([0, 2, 0]), torch.tensor([4, 1, 4]), ints(3)))
case("index-put-setitem", lambda x, i: _setitem(x, i), lambda: (rnd(5, 3), torch.tensor([4, 1])))
case("index-select-0", lambda x, i: torch.index_select(x, 0, i), lambda: (rnd(5, 3), torch.tensor([4, 0, 4, 2])))
case("index-select-neg1-i64", lambda x, i: torch.index_select(x, -1, i), lambda: (ints(3, 5), torch.tensor([1, 3])))
case("index-tensor", lambda x, i: x[i], lambda: (rnd(5, 3), torch.tensor([[0, 4], [2, 2]])))
case("index-tensor-negative", lambda x, i: x[i], lambda: (rnd(5, 3), torch.tensor([-1, 0, -5])))
case("index-tensor-dim1", lambda x, i: x[:, i], lambda: (rnd(3, 5), torch.tensor([4, 1])))
case("index-tensor-2", lambda x, i, j: x[i, j], lambda: (rnd(3, 5), torch.tensor([0, 2]), torch.tensor([4, 1])))
case("index-add", lambda x, i, s: x.index_add(0, i, s), lambda: (rnd(5, 3), torch.tensor([1, 1, 4]), rnd(3, 3)))
module("embedding", lambda: nn.Embedding(10, 4), lambda: (ints(2, 3, lo=0, hi=10),))
module("embedding-padding-idx", lambda: nn.Embedding(10, 4, padding_idx=0), lambda: (ints(2, 3, lo=0, hi=3),))
case("masked-fill", lambda x, m: x.masked_fill(m, -1e9), lambda: (rnd(3, 4), bools(3, 4)))
case("masked-fill-broadcast-inf", lambda x, m: x.masked_fill(m, float("-inf")), lambda: (rnd(2, 3, 4), bools(3, 1)))
case("masked-fill-0d-tensor-i32", lambda x, m, v: x.masked_fill(m, v), lambda: (ints(3, 4, dtype=i32), bools(3, 4), torch.tensor(7, dtype=i32)))
case("one-hot", lambda i: F.one_hot(i, 5), lambda: (ints(2, 3, lo=0, hi=5),))


def _setitem(x, i):
    y = x.clone()
    y[i] = 0.5
    return y


# ---- cumulative ----

case("cumsum-0-f32", lambda x: torch.cumsum(x, 0), lambda: (rnd(3, 4),))
case("cumsum-neg1-f64", lambda x: torch.cumsum(x, -1), lambda: (rnd(3, 4, dtype=f64),))
case("cumsum-i64", lambda x: torch.cumsum(x, 1), lambda: (ints(3, 4),))
case("cumsum-i32-promotes", lambda x: torch.cumsum(x, 1), lambda: (ints(3, 4, dtype=i32),))
case("cumsum-bool", lambda x: torch.cumsum(x, -1), lambda: (bools(3, 4),))
case("cumsum-dtype-f64", lambda x: torch.cumsum(x, 0, dtype=f64), lambda: (rnd(3, 4),))
case("cumsum-0d", lambda x: torch.cumsum(x, 0), lambda: (torch.tensor(2.5),))
case("cumprod-1-f32", lambda x: torch.cumprod(x, 1), lambda: (rnd(3, 4),))
case("cumprod-i64", lambda x: torch.cumprod(x, 0), lambda: (ints(3, 4, lo=-3, hi=4),))
case("logcumsumexp", lambda x: torch.logcumsumexp(x, -1), lambda: (rnd(3, 4),))
case("cummax", lambda x: torch.cummax(x, 1), lambda: (rnd(3, 4),))

# ---- sort / topk (distinct floats; ints only with stable=True, whose order is defined) ----

case("sort-neg1", lambda x: torch.sort(x, -1), lambda: (rnd(3, 5),))
case("sort-0-desc", lambda x: torch.sort(x, 0, descending=True), lambda: (rnd(4, 3),))
case("sort-stable-i64", lambda x: torch.sort(x, dim=-1, stable=True), lambda: (ints(3, 6, lo=0, hi=3),))
case("sort-f64", lambda x: torch.sort(x, -1), lambda: (rnd(3, 5, dtype=f64),))
case("argsort", lambda x: torch.argsort(x, -1, descending=True), lambda: (rnd(3, 5),))
case("topk-2", lambda x: torch.topk(x, 2), lambda: (rnd(3, 5),))
case("topk-smallest", lambda x: torch.topk(x, 3, largest=False), lambda: (rnd(3, 5),))
case("topk-dim0", lambda x: torch.topk(x, 2, dim=0), lambda: (rnd(4, 3),))
case("topk-i32", lambda x: torch.topk(x, 1), lambda: (torch.randperm(12).reshape(3, 4).to(i32),))
case("topk-values-only", lambda x: torch.topk(x, 2).values, lambda: (rnd(3, 5),))

# ---- pooling ----

IMG = lambda dt=f32: (rnd(2, 3, 7, 7, dtype=dt),)  # noqa: E731
POOL = {
    "maxpool-k2": lambda x: F.max_pool2d(x, 2),
    "maxpool-k3s2p1": lambda x: F.max_pool2d(x, 3, 2, 1),
    "maxpool-ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    "maxpool-indices": lambda x: F.max_pool2d(x, 2, return_indices=True),
    "maxpool-indices-k3s2p1": lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
    "avgpool-k2": lambda x: F.avg_pool2d(x, 2),
    "avgpool-no-pad-count": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avgpool-ceil": lambda x: F.avg_pool2d(x, 2, ceil_mode=True),
    "avgpool-divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    "adaptive-avg-1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive-avg-2x3": lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
    "adaptive-avg-3": lambda x: F.adaptive_avg_pool2d(x, 3),
    "adaptive-max-2": lambda x: F.adaptive_max_pool2d(x, 2),
}
for name, fn in POOL.items():
    case(f"pool-{name}-f32", fn, IMG)
case("pool-maxpool-k2-f64", POOL["maxpool-k2"], lambda: IMG(f64))
case("pool-avgpool-k2-f64", POOL["avgpool-k2"], lambda: IMG(f64))
case("pool-maxpool1d", lambda x: F.max_pool1d(x, 3, 2), lambda: (rnd(2, 3, 9),))
case("pool-avgpool1d", lambda x: F.avg_pool1d(x, 2), lambda: (rnd(2, 3, 9),))
case("pool-adaptive-avg1d", lambda x: F.adaptive_avg_pool1d(x, 4), lambda: (rnd(2, 3, 9),))

# ---- convolutions (real module classes) ----

X4 = lambda dt=f32: (rnd(1, 4, 8, 8, dtype=dt),)  # noqa: E731
CONV = {
    "conv2d": lambda: nn.Conv2d(4, 6, 3),
    "conv2d-stride2": lambda: nn.Conv2d(4, 6, 3, stride=2),
    "conv2d-pad1": lambda: nn.Conv2d(4, 6, 3, padding=1),
    "conv2d-pad-same": lambda: nn.Conv2d(4, 6, 3, padding="same", dilation=2),
    "conv2d-dilation2": lambda: nn.Conv2d(4, 6, 3, dilation=2),
    "conv2d-groups2": lambda: nn.Conv2d(4, 6, 3, groups=2),
    "conv2d-depthwise": lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4),
    "conv2d-rect": lambda: nn.Conv2d(4, 6, (1, 3), stride=(2, 1), padding=(0, 2)),
    "conv2d-reflect": lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"),
    "convT2d": lambda: nn.ConvTranspose2d(4, 6, 3),
    "convT2d-stride2-outpad": lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
    "convT2d-groups2": lambda: nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2),
}
for name, build in CONV.items():
    module(f"conv-{name}-f32", build, X4)
module("conv-conv2d-f64", lambda: nn.Conv2d(4, 6, 3).double(), lambda: X4(f64))
module("conv-conv1d", lambda: nn.Conv1d(4, 6, 3), lambda: (rnd(2, 4, 10),))
module("conv-conv1d-stride-pad-dil", lambda: nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2), lambda: (rnd(2, 4, 10),))
module("conv-convT1d", lambda: nn.ConvTranspose1d(4, 3, 3, stride=2), lambda: (rnd(2, 4, 5),))
module("conv-conv3d", lambda: nn.Conv3d(2, 3, 2), lambda: (rnd(1, 2, 4, 4, 4),))

# ---- resize ----

SMALL = lambda: (rnd(1, 2, 4, 5),)  # noqa: E731
RESIZE = {
    "nearest-x2": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    "nearest-size": lambda x: F.interpolate(x, size=(7, 3), mode="nearest"),
    "bilinear-x2": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "bilinear-align": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
    "bilinear-down": lambda x: F.interpolate(x, size=(3, 3), mode="bilinear"),
    "bilinear-size-align": lambda x: F.interpolate(x, size=(6, 9), mode="bilinear", align_corners=True),
}
for name, fn in RESIZE.items():
    case(f"resize-{name}", fn, SMALL)
module("resize-upsample-module", lambda: nn.Upsample(scale_factor=2, mode="nearest"), SMALL)

# ---- padding modes ----

PADS = {
    "constant": lambda x: F.pad(x, (1, 2), value=0.5),
    "constant-2d": lambda x: F.pad(x, (1, 1, 2, 0)),
    "constant-negative": lambda x: F.pad(x, (-1, 2, 0, -1)),
    "reflect": lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"),
    "replicate": lambda x: F.pad(x, (2, 1, 1, 2), mode="replicate"),
    "circular": lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"),
}
for name, fn in PADS.items():
    case(f"pad-{name}", fn, SMALL)
case("pad-reflect-1d", lambda x: F.pad(x, (3, 1), mode="reflect"), lambda: (rnd(2, 3, 5),))
case("pad-replicate-1d-i64", lambda x: F.pad(x.float(), (1, 2), mode="replicate").long(), lambda: (ints(2, 3, 5),))
case("pad-constant-i32", lambda x: F.pad(x, (1, 1), value=-7), lambda: (ints(3, 4, dtype=i32),))

# ---- views ----

X = lambda dt=f32: (rnd(2, 3, 4, dtype=dt),)  # noqa: E731
VIEWS = {
    "permute": lambda x: x.permute(2, 0, 1),
    "permute-neg": lambda x: x.permute(-1, 0, -2) * 2,
    "expand": lambda x: x[:, :1].expand(2, 5, 4),
    "expand-new-dim": lambda x: x.expand(3, -1, -1, -1) + 1,
    "broadcast-to": lambda x: torch.broadcast_to(x[:1], (3, 3, 4)),
    "slice-past-end": lambda x: x[:, 1:100],
    "slice-before-start": lambda x: x[:, -100:2],
    "slice-step": lambda x: x[:, ::2, 1::2],
    "slice-neg": lambda x: x[..., 1:-1],
    "select-neg": lambda x: x[:, -1],
    "none-index": lambda x: x[:, None, ..., None],
    "flatten": lambda x: x.flatten(),
    "flatten-1": lambda x: x.flatten(1),
    "unsqueeze-neg1": lambda x: x.unsqueeze(-1) * 2,
    "squeeze-all": lambda x: x[:1, :, :1].squeeze(),
    "squeeze-dim": lambda x: x[:, :1].squeeze(1),
    "squeeze-dims": lambda x: x[:1, :, :1].squeeze((0, -1)),
    "transpose-neg": lambda x: x.transpose(0, -1),
    "mT": lambda x: x.mT + 1,
    "narrow": lambda x: x.narrow(1, 1, 2),
    "reshape": lambda x: x.reshape(6, 4),
    "view-infer": lambda x: x.view(-1, 8),
    "unflatten": lambda x: x.unflatten(-1, (2, 2)),
    "roll-2": lambda x: torch.roll(x, (1, -2), (0, 2)),
    "flip": lambda x: torch.flip(x, (0, -1)),
    "repeat": lambda x: x.repeat(2, 1, 2),
    "repeat-interleave": lambda x: torch.repeat_interleave(x, 2, dim=1),
    "diagonal": lambda x: torch.diagonal(x, 0, 1, 2),
    "tril": lambda x: torch.tril(x),
    "triu-1": lambda x: torch.triu(x, 1),
    "split-uneven": lambda x: torch.split(x, 3, dim=-1),
    "split-sizes": lambda x: torch.split(x, [1, 3], dim=-1),
    "chunk": lambda x: torch.chunk(x, 2, dim=1),
    "unbind": lambda x: torch.unbind(x, 0),
    "contiguous-after-t": lambda x: x.transpose(1, 2).contiguous().view(2, -1),
}
for name, fn in VIEWS.items():
    case(f"view-{name}-f32", fn, X)
for name in ("permute", "slice-step"):
    for dt in (i64, b1, f16):
        case(f"view-{name}-{SHORT[dt]}", VIEWS[name], lambda dt=dt: ((rnd(2, 3, 4) > 0) if dt == b1 else rnd(2, 3, 4, scale=5).to(dt),))
case("view-permute-0d", lambda x: x.permute(()), lambda: (torch.tensor(3.5),))
case("view-permute-0d-times2", lambda x: x.permute(()) * 2, lambda: (torch.tensor(3.5),))
case("view-flatten-0d", lambda x: x.flatten(), lambda: (torch.tensor(3.5),))
case("view-reshape-0d", lambda x: x.reshape(1, 1), lambda: (torch.tensor(3.5),))
case("view-unsqueeze-0d", lambda x: x.unsqueeze(-1), lambda: (torch.tensor(3.5),))
case("view-reshape-to-0d", lambda x: x.reshape(()) * 2, lambda: (rnd(1, 1),))
case("view-cat-0", lambda a, b: torch.cat([a, b]), lambda: (rnd(2, 3), rnd(3, 3)))
case("view-cat-neg1", lambda a, b: torch.cat([a, b], -1), lambda: (rnd(2, 3), rnd(2, 1)))
case("view-cat-promote", lambda a, b: torch.cat([a, b], 0), lambda: (ints(2, 3), rnd(1, 3)))
case("view-cat-empty", lambda a, b: torch.cat([a, b], 0), lambda: (torch.empty(0, 3), rnd(2, 3)))
case("view-stack-0", lambda a, b: torch.stack([a, b]), lambda: (rnd(2, 3), rnd(2, 3)))
case("view-stack-neg1-i32", lambda a, b: torch.stack([a, b], -1), lambda: (ints(2, 3, dtype=i32), ints(2, 3, dtype=i32)))
case("view-hstack", lambda a, b: torch.hstack([a, b]), lambda: (rnd(2, 3), rnd(2, 2)))

# ---- contractions ----

MATMUL = {
    "mm": (torch.mm, lambda dt: (rnd(3, 4, dtype=dt), rnd(4, 5, dtype=dt))),
    "matmul-1d-1d": (torch.matmul, lambda dt: (rnd(4, dtype=dt), rnd(4, dtype=dt))),
    "matmul-1d-2d": (torch.matmul, lambda dt: (rnd(4, dtype=dt), rnd(4, 5, dtype=dt))),
    "matmul-2d-1d": (torch.matmul, lambda dt: (rnd(3, 4, dtype=dt), rnd(4, dtype=dt))),
    "matmul-3d-2d": (torch.matmul, lambda dt: (rnd(2, 3, 4, dtype=dt), rnd(4, 5, dtype=dt))),
    "matmul-broadcast": (torch.matmul, lambda dt: (rnd(2, 1, 3, 4, dtype=dt), rnd(3, 4, 2, dtype=dt))),
    "bmm": (torch.bmm, lambda dt: (rnd(2, 3, 4, dtype=dt), rnd(2, 4, 5, dtype=dt))),
}
for name, (fn, gen) in MATMUL.items():
    case(f"mm-{name}-f32", fn, lambda gen=gen: gen(f32))
for name in ("mm", "bmm"):
    fn, gen = MATMUL[name]
    for dt in (f64, f16, bf16):
        case(f"mm-{name}-{SHORT[dt]}", fn, lambda gen=gen, dt=dt: gen(dt))
case("mm-mm-i64", torch.mm, lambda: (ints(3, 4), ints(4, 5)))
case("mm-mm-i32", torch.mm, lambda: (ints(3, 4, dtype=i32), ints(4, 5, dtype=i32)))
EINSUM = {
    "ij,jk->ik": ((3, 4), (4, 5)), "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)), "ii->i": ((4, 4),),
    "ij->ji": ((3, 4),), "i,j->ij": ((3,), (4,)), "bhqd,bhkd->bhqk": ((1, 2, 3, 4), (1, 2, 5, 4)),
    "ij,ij->": ((3, 4), (3, 4)), "ij->": ((3, 4),), "bij,jk->bk": ((2, 3, 4), (4, 5)),
}
for eq, shapes in EINSUM.items():
    name = eq.replace(",", "_").replace("->", "-to-") or "scalar"
    case(f"einsum-{name}", lambda *xs, eq=eq: torch.einsum(eq, *xs), lambda shapes=shapes: tuple(rnd(*s) for s in shapes))
module("linear", lambda: nn.Linear(4, 5), lambda: (rnd(3, 4),))
module("linear-3d", lambda: nn.Linear(4, 5), lambda: (rnd(2, 3, 4),))
module("linear-nobias", lambda: nn.Linear(4, 5, bias=False), lambda: (rnd(3, 4),))
module("linear-f64", lambda: nn.Linear(4, 5).double(), lambda: (rnd(3, 4, dtype=f64),))
module("linear-1d-input", lambda: nn.Linear(4, 5), lambda: (rnd(4),))
case("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), lambda: (rnd(5), rnd(3, 4), rnd(4, 5)))
case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b), lambda: (rnd(2, 3, 5), rnd(2, 3, 4), rnd(2, 4, 5)))
case("outer", torch.outer, lambda: (rnd(3), rnd(4)))
case("dot", torch.dot, lambda: (rnd(4), rnd(4)))
case("mv", torch.mv, lambda: (rnd(3, 4), rnd(4)))

# ---- normalisation ----


def batch_norm(cls, c):
    def build():
        bn = cls(c)
        with torch.no_grad():  # running statistics that are not the identity
            bn.running_mean.copy_(torch.randn(c))
            bn.running_var.copy_(torch.rand(c) + 0.5)
            bn.weight.copy_(torch.randn(c))
            bn.bias.copy_(torch.randn(c))
        return bn
    return build


module("norm-layernorm", lambda: nn.LayerNorm(5), lambda: (rnd(2, 3, 5),))
module("norm-layernorm-2d-noaffine", lambda: nn.LayerNorm((3, 5), elementwise_affine=False), lambda: (rnd(2, 3, 5),))
module("norm-layernorm-f64", lambda: nn.LayerNorm(5).double(), lambda: (rnd(2, 3, 5, dtype=f64),))
module("norm-layernorm-f16", lambda: nn.LayerNorm(5).half(), lambda: (rnd(2, 3, 5, dtype=f16),))
module("norm-batchnorm2d-eval", batch_norm(nn.BatchNorm2d, 3), lambda: (rnd(2, 3, 4, 4),))
module("norm-batchnorm1d-eval", batch_norm(nn.BatchNorm1d, 4), lambda: (rnd(3, 4),))
module("norm-groupnorm", lambda: nn.GroupNorm(2, 4), lambda: (rnd(2, 4, 3, 3),))
module("norm-groupnorm-per-channel", lambda: nn.GroupNorm(4, 4), lambda: (rnd(2, 4, 3, 3),))
module("norm-instancenorm", lambda: nn.InstanceNorm2d(3), lambda: (rnd(2, 3, 4, 4),))
module("norm-rmsnorm", lambda: nn.RMSNorm(5), lambda: (rnd(2, 3, 5),))
case("norm-normalize", lambda x: F.normalize(x, dim=-1), lambda: (rnd(3, 4),))
case("softmax-neg1", lambda x: torch.softmax(x, -1), lambda: (rnd(3, 4),))
case("softmax-0", lambda x: torch.softmax(x, 0), lambda: (rnd(3, 4),))
case("softmax-large", lambda x: torch.softmax(x * 100, -1), lambda: (rnd(3, 4),))
case("softmax-masked-row", lambda x, m: torch.softmax(x.masked_fill(m, float("-inf")), -1),
     lambda: (rnd(3, 4), torch.tensor([[True, False, False, True]] * 2 + [[True] * 4])))
case("softmax-f64", lambda x: torch.softmax(x, -1), lambda: (rnd(3, 4, dtype=f64),))
case("softmax-f16", lambda x: torch.softmax(x, -1), lambda: (rnd(3, 4, dtype=f16),))
case("softmax-bf16", lambda x: torch.softmax(x, -1), lambda: (rnd(3, 4, dtype=bf16),))
case("softmax-dtype-arg", lambda x: torch.softmax(x, -1, dtype=f64), lambda: (rnd(3, 4),))
case("log-softmax-neg1", lambda x: torch.log_softmax(x, -1), lambda: (rnd(3, 4),))
case("log-softmax-1-f64", lambda x: torch.log_softmax(x, 1), lambda: (rnd(2, 3, 4, dtype=f64),))
case("softmin", lambda x: F.softmin(x, -1), lambda: (rnd(3, 4),))

# ---- activations ----

ACT = {
    "gelu": F.gelu, "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "relu": F.relu, "relu6": F.relu6, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "elu": F.elu,
    "leaky-relu": lambda x: F.leaky_relu(x, 0.1),
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "softplus": F.softplus,
    "softplus-beta-threshold": lambda x: F.softplus(x, beta=2, threshold=3), "mish": F.mish,
    "selu": F.selu, "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5),
    "logsigmoid": F.logsigmoid,
    "threshold": lambda x: F.threshold(x, 0.2, -1.0), "glu": F.glu,
}
for name, fn in ACT.items():
    case(f"act-{name}-f32", fn, lambda: (rnd(3, 4, scale=3),))
for name in ("gelu", "gelu-tanh", "tanh", "silu", "sigmoid", "softplus"):
    case(f"act-{name}-f64", ACT[name], lambda: (rnd(3, 4, scale=3, dtype=f64),))
for name in ("gelu", "gelu-tanh", "silu"):
    for dt in (f16, bf16):
        case(f"act-{name}-{SHORT[dt]}", ACT[name], lambda dt=dt: (rnd(3, 4, scale=3, dtype=dt),))
case("act-relu-i64", F.relu, lambda: (ints(3, 4),))
module("act-prelu-module", lambda: nn.PReLU(3), lambda: (rnd(2, 3, 4),))
module("act-gelu-tanh-module", lambda: nn.GELU("tanh"), lambda: (rnd(3, 4, scale=3),))

# ---- dtype casts (fractional, negative and out-of-range values on purpose) ----

CASTS = {
    "f32-i64": (lambda x: x.to(i64), lambda: (rnd(3, 4, scale=5),)),
    "f32-i32": (lambda x: x.to(i32), lambda: (rnd(3, 4, scale=5),)),
    "f32-i8": (lambda x: x.to(i8), lambda: (rnd(3, 4, scale=5),)),
    "f32-u8": (lambda x: x.to(u8), lambda: (pos(3, 4) * 100,)),
    "f32-bool": (lambda x: x.to(b1), lambda: (rnd(3, 4).round(),)),
    "f32-f16": (lambda x: x.half(), lambda: (rnd(3, 4),)),
    "f32-bf16": (lambda x: x.bfloat16(), lambda: (rnd(3, 4),)),
    "f32-f64": (lambda x: x.double() * 1.1, lambda: (rnd(3, 4),)),
    "f64-f32": (lambda x: x.float(), lambda: (rnd(3, 4, dtype=f64),)),
    "f16-f32": (lambda x: x.float(), lambda: (rnd(3, 4, dtype=f16),)),
    "bf16-f32": (lambda x: x.float(), lambda: (rnd(3, 4, dtype=bf16),)),
    "f16-f64": (lambda x: x.double(), lambda: (rnd(3, 4, dtype=f16),)),
    "i64-f32": (lambda x: x.float(), lambda: (ints(3, 4, lo=-1000, hi=1000),)),
    "i64-i32-wrap": (lambda x: x.to(i32), lambda: (ints(3, 4) + 2 ** 33,)),
    "i64-i8-wrap": (lambda x: x.to(i8), lambda: (ints(3, 4, lo=-300, hi=300),)),
    "i64-bool": (lambda x: x.bool(), lambda: (ints(3, 4, lo=-1, hi=2),)),
    "i8-f32": (lambda x: x.float(), lambda: (ints(3, 4, lo=-128, hi=128, dtype=i8),)),
    "bool-f32": (lambda x: x.float(), lambda: (bools(3, 4),)),
    "bool-i64": (lambda x: x.long(), lambda: (bools(3, 4),)),
    "type-as": (lambda x, y: x.type_as(y), lambda: (rnd(3, 4, scale=5), ints(2, dtype=i32))),
}
for name, (fn, gen) in CASTS.items():
    case(f"cast-{name}", fn, gen)

# uint8 (unsigned: comparisons, widening and max must not treat 200 as -56)
U8 = lambda: (ints(3, 4, lo=0, hi=256, dtype=u8),)  # noqa: E731
for name, fn in {"to-f32": lambda x: x.float(), "to-i64": lambda x: x.long(), "gt": lambda x: x > 100,
                 "max": lambda x: x.max(-1).values, "sum": lambda x: x.sum(-1), "add-wrap": lambda x: x + 100,
                 "floordiv": lambda x: x // 3, "mul-float": lambda x: x * 0.5}.items():
    case(f"u8-{name}", fn, U8)

# ---- creation ops inside the module ----

case("create-arange", lambda x: x + torch.arange(4), lambda: (rnd(3, 4),))
case("create-arange-step-f32", lambda x: x + torch.arange(0, 2, 0.5), lambda: (rnd(3, 4),))
case("create-zeros-like-i32", lambda x: torch.zeros_like(x) + 1, lambda: (ints(3, 4, dtype=i32),))
case("create-full-like", lambda x: torch.full_like(x, 2.5) * x, lambda: (rnd(3, 4),))
case("create-ones-i64", lambda x: torch.ones(2, 3, dtype=i64) + x.shape[0], lambda: (rnd(3, 4),))
case("create-linspace", lambda x: x * torch.linspace(-1, 1, 4), lambda: (rnd(3, 4),))
case("create-eye", lambda x: x @ torch.eye(4), lambda: (rnd(3, 4),))

# ---- what a module returns ----

case("out-tuple", lambda x: (x + 1, x * 2), lambda: (rnd(3, 4),))
case("out-nested-tuple", lambda x: ((x + 1, x.sum()), x.argmax(-1)), lambda: (rnd(3, 4),))
case("out-list", lambda x: [x + 1, x - 1], lambda: (rnd(3, 4),))
case("out-dict", lambda x: {"b": x + 1, "a": x.sum(-1)}, lambda: (rnd(3, 4),))
case("out-dict-dtypes", lambda x: {"float": x * 2, "int": x.argmax(-1), "mask": x > 0}, lambda: (rnd(3, 4),))
case("out-0d", lambda x: x.sum(), lambda: (rnd(3, 4),))
case("out-0d-i64", lambda x: x.argmax(), lambda: (rnd(3, 4),))
case("out-0d-input", lambda x: x * 2, lambda: (torch.tensor(1.5),))
case("out-several-dtypes", lambda x: (x, x.double(), x.half(), x.to(i64), x.to(i32), x > 0),
     lambda: (rnd(3, 4, scale=4),))
case("out-python-int", lambda x: (x * 2, x.shape[0]), lambda: (rnd(3, 4),))
case("out-python-float", lambda x: (x + 1, 0.5), lambda: (rnd(3, 4),))
case("out-identity", lambda x: x, lambda: (rnd(3, 4),))
case("out-same-tensor-twice", lambda x: (x + 1,) * 2, lambda: (rnd(3, 4),))
case("out-empty", lambda x: x[:, :0] + 1, lambda: (rnd(3, 4),))


# ---- modules that update their inputs in place (torch.export returns the new values first) ----

def _add_(x):
    x.add_(1)
    return x * 2


def _clamp_sum_(x):
    x.clamp_(-0.5, 0.5)
    return x.sum()


def _setitem_(x, y):
    x[0] = y.sum()
    return y + 1


case("inplace-add", _add_, lambda: (rnd(3, 4),), mutated=(0,))
case("inplace-clamp-0d-out", _clamp_sum_, lambda: (rnd(3, 4),), mutated=(0,))
case("inplace-setitem-second-input", _setitem_, lambda: (rnd(3, 4), rnd(4)), mutated=(0,))
case("inplace-index-put-acc", lambda x, i, v: x.index_put_((i,), v, accumulate=True).sum(0),
     lambda: (rnd(5, 3), torch.tensor([1, 3, 1]), rnd(3, 3)), mutated=(0,))

