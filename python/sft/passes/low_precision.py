"""sft-low-precision: f32 contractions computed from bf16 (or f16) inputs, accumulating in f32.

Each chosen `sft.contract` gets, directly before it, one `sft.map` per f32 input that rounds it
with `arith.truncf`; the contraction then reads the rounded tensors and still produces (and
accumulates into) f32. The rest of the pipeline sees ordinary sft: sft-lower gives a
linalg.matmul / batch_matmul with bf16 ins and f32 outs, or a generic whose body extends each
input before the multiply, and a GPU's MMA intrinsics (bf16 or f16 in, f32 accumulate) apply.

This changes the numbers a program computes (inputs keep 8 or 11 bits of mantissa), so it is
only ever a plan's decision (`Plan.low_precision`), which the search makes only where the user
allowed it (`sft.compile(..., precision="bf16")`).

`ops` lists (op id, type) by op id among the sft ops the pass sees. The casts it inserts are
sft ops too: the ids of the ops after it shift (see `renumber`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, pairs
from ..errors import IllegalPlan
from ..ir import tm
from .common import compute_ops, element_type, items_option, maps_attr, static_shape

LOW_PRECISION_TYPES = ("bf16", "f16")  # what an f32 contraction's inputs may be rounded to


def _low_type(name: str):
    return tm.BF16Type.get() if name == "bf16" else tm.F16Type.get()


def _is_f32(value) -> bool:
    return isinstance(element_type(value), tm.F32Type)


def castable(module) -> dict[int, tuple[tuple[int, bool], ...]]:
    """The contractions the search may run in low precision: op id -> per input the pass would
    cast, (its element count, whether the cast is a dispatch of its own). Both inputs and the
    result f32: the low-precision twin of such a kernel reads two 2-byte operands.

    A cast of a function argument (through views: a transposed weight) has no producer to fuse
    into, and IREE makes it a dispatch of its own (the mlp's bf16 module on cuda:sm_90 has 5
    dispatches where its f32 one has 2); a cast of a computed value joins its producer's."""
    found = {}
    with module.context:
        for op_id, op in enumerate(compute_ops(module)):
            ins = dialect.inputs(op)
            if op.name == "sft.contract" and _is_f32(op.results[0]) and all(map(_is_f32, ins)):
                found[op_id] = tuple((_elements(v), _from_argument(v)) for v in ins)
    return found


def _from_argument(value) -> bool:
    """`value` is a function argument, or views of one."""
    while True:
        owner = value.owner
        if isinstance(owner, tm.Block):
            return True
        op = getattr(owner, "operation", owner)
        if op.name != "sft.view":
            return False
        value = dialect.inputs(op)[0]


def _elements(value) -> int:
    count = 1
    for size in static_shape(value):
        count *= size
    return count


def renumber(op_id: int, casts: dict[int, int]) -> int:
    """An op's id after the pass inserted `casts[c]` cast ops directly before each contraction
    `c` (ids counted before the pass): every cast before it moves it on by one."""
    return op_id + sum(n for c, n in casts.items() if c <= op_id)


def _cast(value, dtype: str, ip):
    """An sft.map rounding the f32 tensor `value` to `dtype`, element by element."""
    shape = static_shape(value)
    low = _low_type(dtype)
    identity = tm.AffineMap.get_identity(len(shape))
    cast = dialect.create("sft.map", [value], {"maps": maps_attr([identity])},
                          [tm.RankedTensorType.get(shape, low)], regions=1, ip=ip)
    block = cast.regions[0].blocks.append(element_type(value))
    with tm.InsertionPoint(block):
        rounded = tm.Operation.create("arith.truncf", results=[low], operands=[block.arguments[0]])
        tm.Operation.create("gpu.yield", operands=[rounded.results[0]])
    return cast.results[0]


@dataclass(frozen=True)
class LowPrecisionPass:
    """Compute chosen f32 contractions from bf16/f16 inputs, accumulating in f32: {ops=ID:TYPE,...}."""

    ops: tuple[tuple[int, str], ...] = ()
    name = "sft-low-precision"

    @classmethod
    def from_options(cls, text: str) -> "LowPrecisionPass":
        """`ops=ID:TYPE,ID:TYPE` (sft-opt -p 'sft-low-precision{ops=2:bf16,5:bf16}')."""
        return cls(items_option(cls.name, text, "ops", "ID:TYPE",
                                lambda op_id, dtype: (int(op_id), dtype.strip())))

    def __call__(self, module) -> None:
        if not self.ops:
            return
        with module.context, tm.Location.unknown():
            compute = compute_ops(module)
            chosen = []
            for op_id, dtype in self.ops:
                if dtype not in LOW_PRECISION_TYPES:
                    raise IllegalPlan(f"plan computes op {op_id} in {dtype!r}, not a low-precision "
                                      f"input type (known: {', '.join(LOW_PRECISION_TYPES)})")
                op = compute[op_id] if 0 <= op_id < len(compute) else None
                if (op is None or op.name != "sft.contract" or not _is_f32(op.results[0])
                        or not any(map(_is_f32, dialect.inputs(op)))):
                    raise IllegalPlan(f"plan computes op {op_id} from {dtype} inputs, but it is "
                                      "not a contraction of f32 inputs into an f32 result")
                chosen.append((op, dtype))
            # Ops were looked up before any cast was inserted: ids count the program as given.
            for op, dtype in chosen:
                with op.location:
                    for i, value in enumerate(dialect.inputs(op)):
                        if _is_f32(value):
                            op.operands[i] = _cast(value, dtype, tm.InsertionPoint(op))


def _low_precision(value, what: str) -> tuple[tuple[int, str], ...]:
    """[[op id, "bf16" | "f16"], ...] as pairs; another type is an error naming the entry."""
    found = pairs(value, what)
    for i, (_, dtype) in enumerate(found):
        if dtype not in LOW_PRECISION_TYPES:
            raise ValueError(f"{what}[{i}]: {json.dumps(dtype)} is not a low-precision "
                             f"input type (known: {', '.join(LOW_PRECISION_TYPES)})")
    return tuple(found)


KIND = DecisionKind(
    field="low_precision", type="tuple[tuple[int, str], ...]", default=(),
    doc="(op id, \"bf16\" | \"f16\") for f32 contractions whose inputs are rounded to that type, "
        "accumulation and result staying f32 (only where the user allowed it with `precision=`); "
        "it inserts one cast op per f32 input before its contraction, so the ids of the kinds "
        "after it count them",
    parse=_low_precision, stage=SFT, make_pass=LowPrecisionPass,
    describe=lambda ops: f"{ops[0][1]} inputs, f32 accumulation on ops {[op for op, _ in ops]}")
