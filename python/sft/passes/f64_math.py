"""sft-expand-f64-math: f64 math ops that IREE's CPU backend cannot compile, as arith ops.

IREE's embedded CPU executables link no libm and its polynomial approximations are f32 only:
an f64 `math.tanh`, `sin`, `cos`, `atan`, `atan2` or `erf` fails in iree-lld ("undefined symbol:
tanh") or does not legalize. This pass replaces each scalar one, wherever it sits (the body of
an sft.map or a linalg.generic), by `mathlib.functions`' implementation, emitted as arith ops:
the same algorithm the accuracy tests run on numpy. Only for targets that keep f64 (IREE's
f64-to-f32 demotion would break the bit operations); program.lower applies it there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import arith, tm
from ..mathlib.functions import FUNCTIONS


class _Value:
    """An f64, i64 or i1 SSA value with Python's operators emitting arith ops."""

    def __init__(self, value):
        self.value = value

    @property
    def is_float(self) -> bool:
        return isinstance(self.value.type, tm.F64Type)

    def _wrap(self, other):
        if isinstance(other, _Value):
            return other
        return _Value(MlirArith.const(other, self.is_float))

    def _binary(self, other, float_op, int_op, swap=False):
        a, b = self, self._wrap(other)
        if swap:
            a, b = b, a
        return _Value((float_op if self.is_float else int_op)(a.value, b.value))

    def __add__(self, o): return self._binary(o, arith.addf, arith.addi)
    def __radd__(self, o): return self._binary(o, arith.addf, arith.addi, swap=True)
    def __sub__(self, o): return self._binary(o, arith.subf, arith.subi)
    def __rsub__(self, o): return self._binary(o, arith.subf, arith.subi, swap=True)
    def __mul__(self, o): return self._binary(o, arith.mulf, arith.muli)
    def __rmul__(self, o): return self._binary(o, arith.mulf, arith.muli, swap=True)
    def __truediv__(self, o): return self._binary(o, arith.divf, arith.divsi)
    def __rtruediv__(self, o): return self._binary(o, arith.divf, arith.divsi, swap=True)
    def __neg__(self): return _Value(arith.negf(self.value))


class MlirArith:
    """`mathlib.functions`' arithmetic, emitting arith ops at the current insertion point."""

    @staticmethod
    def const(value, is_float: bool):
        if is_float:
            return arith.constant(tm.F64Type.get(), float(value))
        return arith.constant(tm.IntegerType.get_signless(64), int(value))

    @staticmethod
    def _pair(a, b):
        if not isinstance(a, _Value):
            a = b._wrap(a)
        return a, a._wrap(b)

    @classmethod
    def _compare(cls, a, b, fpred, ipred):
        a, b = cls._pair(a, b)
        if a.is_float:
            return _Value(arith.cmpf(fpred, a.value, b.value))
        return _Value(arith.cmpi(ipred, a.value, b.value))

    @classmethod
    def lt(cls, a, b): return cls._compare(a, b, arith.CmpFPredicate.OLT, arith.CmpIPredicate.slt)
    @classmethod
    def le(cls, a, b): return cls._compare(a, b, arith.CmpFPredicate.OLE, arith.CmpIPredicate.sle)
    @classmethod
    def eq(cls, a, b): return cls._compare(a, b, arith.CmpFPredicate.OEQ, arith.CmpIPredicate.eq)
    @classmethod
    def ne(cls, a, b): return cls._compare(a, b, arith.CmpFPredicate.UNE, arith.CmpIPredicate.ne)

    @staticmethod
    def and_(c, d): return _Value(arith.andi(c.value, d.value))
    @staticmethod
    def or_(c, d): return _Value(arith.ori(c.value, d.value))

    @classmethod
    def select(cls, c, a, b):
        if not isinstance(a, _Value) and not isinstance(b, _Value):
            a = _Value(cls.const(a, isinstance(a, float)))
        a, b = cls._pair(a, b)
        return _Value(arith.select(c.value, a.value, b.value))

    @staticmethod
    def bits(x): return _Value(arith.bitcast(tm.IntegerType.get_signless(64), x.value))
    @staticmethod
    def float_of_bits(i): return _Value(arith.bitcast(tm.F64Type.get(), i.value))
    @staticmethod
    def to_int(x): return _Value(arith.fptosi(tm.IntegerType.get_signless(64), x.value))
    @staticmethod
    def to_float(i): return _Value(arith.sitofp(tm.F64Type.get(), i.value))
    @staticmethod
    def shl(i, n): return _Value(arith.shli(i.value, i._wrap(n).value))
    @staticmethod
    def shr(i, n): return _Value(arith.shrsi(i.value, i._wrap(n).value))
    @staticmethod
    def band(i, j): return _Value(arith.andi(i.value, i._wrap(j).value))
    @staticmethod
    def bor(i, j): return _Value(arith.ori(i.value, i._wrap(j).value))


MATH_OPS = {f"math.{name}": name for name in FUNCTIONS}


@dataclass(frozen=True)
class ExpandF64MathPass:
    """f64 tanh, sin, cos, atan, atan2, erf as arith ops (IREE's CPU code has no f64 libm)."""

    name = "sft-expand-f64-math"

    def __call__(self, module) -> int:
        """Returns how many ops it expanded."""
        found = []

        def visit(op):
            if op.name in MATH_OPS and len(op.results) == 1 \
                    and isinstance(op.results[0].type, tm.F64Type):
                found.append(op)
            return tm.WalkResult.ADVANCE

        with module.context:
            module.operation.walk(visit)
            for op in found:
                function = FUNCTIONS[MATH_OPS[op.name]][0]
                with tm.InsertionPoint(op), op.location:
                    result = function(MlirArith, *(_Value(v) for v in op.operands))
                op.results[0].replace_all_uses_with(result.value)
                op.erase()
        return len(found)
