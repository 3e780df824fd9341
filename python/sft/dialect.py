"""Builders and accessors for sft ops, hiding the slot layout that IRDL forces on operand lists.

The dialect itself is declared in dialects/sft.irdl.mlir; `ir.sft_context()` loads it.
"""

from __future__ import annotations

from .errors import SftError
from .ir import tm

INPUT_SLOTS = 8  # in0..in7 in sft.irdl.mlir
RESULT_SLOTS = 4  # r0..r3 of sft.opaque
COMPUTE_OPS = ("sft.map", "sft.reduce", "sft.contract", "sft.view")


def _segments(count: int, slots: int, tail: int = 0):
    if count > slots:
        raise SftError(f"an sft op holds at most {slots} operands or results here, not {count}")
    return tm.DenseI32ArrayAttr.get([1] * count + [0] * (slots - count) + [1] * tail)


def create(name: str, inputs, attributes: dict, result_types, *, init=None, regions: int = 0,
           loc=None, ip=None):
    """Create an sft op; `inputs` fill the in0.. slots of map and reduce."""
    attributes = dict(attributes)
    operands = list(inputs)
    if name in ("sft.map", "sft.reduce"):
        attributes["operandSegmentSizes"] = _segments(len(operands), INPUT_SLOTS, int(init is not None))
    if init is not None:
        operands.append(init)
    if name == "sft.opaque":
        attributes["resultSegmentSizes"] = _segments(len(result_types), RESULT_SLOTS)
    return tm.Operation.create(name, results=list(result_types), operands=operands,
                               attributes=attributes, regions=regions, loc=loc, ip=ip)


def inputs(op) -> list:
    """The tensors an sft op reads element by element (not the init of a reduction)."""
    operands = list(op.operands)
    if op.name in ("sft.reduce", "sft.contract"):
        return operands[:-1]
    if op.name == "sft.view":
        return operands[:1]
    return operands


def init(op):
    return list(op.operands)[-1]


def padding(op):
    """The pad value of an sft.view, or None."""
    operands = list(op.operands)
    return operands[1] if len(operands) > 1 else None


def fill_value(op):
    """The scalar an sft.map with no inputs fills its result with (a value defined above it),
    or None when `op` is not such a fill."""
    if getattr(op, "name", "") != "sft.map" or inputs(op):
        return None
    body = [o.operation for o in op.regions[0].blocks[0].operations]
    value = body[-1].operands[0] if len(body) == 1 else None
    return value if value is not None and not isinstance(value.owner, tm.Block) else None


def create_fill(value, result_type, ip):
    """An sft.map with no inputs that fills `result_type` with the scalar `value`."""
    fill = create("sft.map", [], {"maps": tm.ArrayAttr.get([])}, [result_type], regions=1, ip=ip)
    with tm.InsertionPoint(fill.regions[0].blocks.append()):
        tm.Operation.create("gpu.yield", operands=[value])
    return fill.results[0]
