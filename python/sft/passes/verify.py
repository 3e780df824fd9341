"""sft-verify: the rules of the sft dialect that IRDL cannot state, reported at the op."""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..errors import SftError
from ..ir import tm, where
from .common import element_type, functions, map_list, ops_of, static_shape
from .lower import FLOAT_COMBINERS


def _fail(op, message):
    raise SftError(f"'{op.name}' op {message}", where(op.location))


def _check_body(op, inputs, result):
    block = op.regions[0].blocks[0]
    types = [element_type(v) for v in inputs]
    if [a.type for a in block.arguments] != types:
        _fail(op, f"body arguments must be the input element types {[str(t) for t in types]}")
    body = ops_of(block)
    if not body or body[-1].name != "gpu.yield" or len(body[-1].operands) != 1:
        _fail(op, "body must end with one gpu.yield of a scalar")
    if body[-1].operands[0].type != element_type(result):
        _fail(op, f"body yields {body[-1].operands[0].type}, result elements are {element_type(result)}")


def verify_op(op) -> None:
    result = op.results[0] if len(op.results) else None
    if op.name == "sft.opaque" or op.name not in dialect.COMPUTE_OPS:
        return
    if static_shape(result) is None or any(static_shape(v) is None for v in op.operands
                                           if isinstance(v.type, tm.ShapedType)):
        _fail(op, "needs tensors with static shapes")
    inputs = dialect.inputs(op)
    if op.name == "sft.view":
        m = tm.AffineMapAttr(op.attributes["map"]).value
        if m.n_dims != len(static_shape(result)) or len(m.results) != len(static_shape(inputs[0])):
            _fail(op, f"map {m} must go from the result's rank to the source's rank")
        return
    maps = map_list(op.attributes["maps"])
    reduction = op.name in ("sft.reduce", "sft.contract")
    expected = len(inputs) + int(reduction)
    if len(maps) != expected:
        _fail(op, f"has {len(maps)} maps, expected {expected} (one per input"
                  f"{', then the result' if reduction else ''})")
    rank = (len(tm.DenseI64ArrayAttr(op.attributes["domain"])) if reduction
            else len(static_shape(result)))
    shaped = inputs + ([result] if reduction else [])
    for i, (m, v) in enumerate(zip(maps, shaped)):
        if m.n_dims != rank or len(m.results) != len(static_shape(v)):
            _fail(op, f"map #{i} {m} must go from {rank} loops to the operand's rank {len(static_shape(v))}")
    if op.name == "sft.reduce":
        kind = tm.StringAttr(op.attributes["kind"]).value
        if kind not in FLOAT_COMBINERS and kind not in ("and", "or"):
            _fail(op, f"unknown reduction kind '{kind}'")
    if op.name in ("sft.map", "sft.reduce"):
        _check_body(op, inputs, result)


@dataclass(frozen=True)
class VerifyPass:
    """Check every sft op; the first violation raises SftError with its location."""

    name = "sft-verify"

    def __call__(self, module) -> None:
        with module.context:
            for func in functions(module):
                for op in ops_of(func.regions[0].blocks[0]):
                    verify_op(op)
