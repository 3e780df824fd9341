"""The decisions imposed on lowered linalg, in IREE's context: kernel configs (`TILES`: each
tiled root gets a `compilation_info` attribute) and the fusion partition (`GROUPS`: each group
becomes one `flow.dispatch.region`, which IREE keeps as it is). The `sft.op` ids are dropped
after (`DropOpIdsPass`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..decisions import config_from_dict
from ..decisions.kind import IREE, DecisionKind, ints, pairs
from ..errors import IllegalPlan
from ..ir import iree_ir
from .lower import OP_ID


def _ops_by_id(module) -> dict[int, tuple[object, object]]:
    """op id -> (the op sft-lower stamped with it, its function's block), module-wide."""
    found = {}
    for func in module.body.operations:
        if func.operation.name != "func.func":
            continue
        block = func.regions[0].blocks[0]
        for op in block.operations:
            op = op.operation
            if OP_ID in op.attributes:
                found[iree_ir.IntegerAttr(op.attributes[OP_ID]).value] = (op, block)
    return found


def _reductions_innermost(op) -> bool:
    """Named contractions are; a generic is when no reduction loop precedes a parallel one."""
    if "iterator_types" not in op.attributes:
        return True
    kinds = [str(t) for t in iree_ir.ArrayAttr(op.attributes["iterator_types"])]
    reductions = [i for i, k in enumerate(kinds) if "reduction" in k]
    return not reductions or all("reduction" in k for k in kinds[reductions[0]:])


def _inside(op, region_op) -> bool:
    while op is not None:
        if op == region_op:
            return True
        parent = op.parent
        op = parent.operation if parent is not None and parent.name != "func.func" else None
    return False


def _wrap_group(block, ops, group) -> None:
    order = [x.operation for x in block.operations]
    ops = sorted(ops, key=order.index)
    last = ops[-1]

    def member(op):
        return any(op == o for o in ops)

    escaping = []
    for op in ops:
        for result in op.results:
            outside = [u.owner for u in result.uses if not member(u.owner)]
            if outside:
                escaping.append(result)
            if any(u.is_before_in_block(last) for u in outside):
                raise IllegalPlan(f"fusion group {list(group)} is not convex: a value it produces "
                                  "is used between its ops")
    region_op = iree_ir.Operation.create(
        "flow.dispatch.region", results=[v.type for v in escaping], operands=[],
        attributes={"operandSegmentSizes": iree_ir.DenseI32ArrayAttr.get([0, 0])},
        regions=2, loc=last.location, ip=iree_ir.InsertionPoint(last))
    body = region_op.regions[0].blocks.append()
    for op in ops:
        op.detach_from_parent()
        iree_ir.InsertionPoint(body).insert(op)
    with iree_ir.InsertionPoint(body), last.location:
        iree_ir.Operation.create("flow.return", operands=escaping)
    for value, result in zip(escaping, region_op.results):
        for use in list(value.uses):
            if not _inside(use.owner, region_op):
                use.owner.operands[use.operand_number] = result


@dataclass(frozen=True)
class ApplyTilesPass:
    """Impose kernel configs: (op id, config) pairs, each a `compilation_info` on its root."""

    tiles: tuple = ()
    name = "sft-apply-tiles"

    def __call__(self, module) -> None:
        with module.context, iree_ir.Location.unknown():
            ops = {i: op for i, (op, _) in _ops_by_id(module).items()}
            for op_id, config in self.tiles:
                if op_id not in ops:
                    raise IllegalPlan(f"plan tiles op {op_id}, which the program does not have")
                if not _reductions_innermost(ops[op_id]):
                    raise IllegalPlan(f"plan tiles op {op_id}, whose summed loops are not "
                                      "innermost: IREE reorders its loops, the tiles would not apply")
                ops[op_id].attributes["compilation_info"] = iree_ir.Attribute.parse(config.attribute())


@dataclass(frozen=True)
class FusionGroupsPass:
    """Impose the fusion partition: each group of op ids becomes one `flow.dispatch.region`."""

    groups: tuple = ()
    name = "sft-fusion-groups"

    def __call__(self, module) -> None:
        with module.context, iree_ir.Location.unknown():
            found = _ops_by_id(module)
            ops = {i: op for i, (op, _) in found.items()}
            for group in self.groups:
                missing = [i for i in group if i not in ops]
                if missing:
                    raise IllegalPlan(f"plan groups ops {missing}, which the program does not have")
                if any(found[i][1] != found[group[0]][1] for i in group):
                    raise IllegalPlan(f"fusion group {list(group)} spans functions")
                if any(ops[i].name == "tensor.pad" for i in group):
                    # IREE leaves a padded tensor's interior unwritten in such a region
                    raise IllegalPlan(f"fusion group {list(group)} holds a pad, which IREE "
                                      "miscompiles inside a dispatch region")
                _wrap_group(found[group[0]][1], [ops[i] for i in group], group)


@dataclass(frozen=True)
class DropOpIdsPass:
    """Remove sft-lower's `sft.op` ids once the plan is imposed (IREE does not know them)."""

    name = "sft-drop-op-ids"

    def __call__(self, module) -> None:
        with module.context:
            for op in _walk(module):
                if OP_ID in op.attributes:
                    del op.attributes[OP_ID]


def _walk(module):
    found = []

    def visit(op):
        found.append(op)
        return iree_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _tiles(value, what: str) -> tuple:
    return tuple((op, config_from_dict(cfg, f"{what}[{i}]")) for i, (op, cfg) in enumerate(pairs(value, what)))


def _groups(value, what: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list of lists of op ids, not {json.dumps(value)}")
    return tuple(ints(g, f"{what}[{i}]") for i, g in enumerate(value))


# Tiles before groups: a group moves its ops into a region, out of the functions' blocks where
# ops are looked up by id.
TILES = DecisionKind(
    field="tiles", type="tuple[tuple[int, KernelConfig], ...]", default=(),
    doc="(op id, config) for kernel roots (a decisions.TileConfig on a CPU, a "
        "decisions.GpuConfig on a GPU)",
    parse=_tiles, stage=IREE, make_pass=ApplyTilesPass)
GROUPS = DecisionKind(
    field="groups", type="tuple[tuple[int, ...], ...]", default=(),
    doc="the fusion partition: groups of op ids, each one dispatch (ops in no group are left to "
        "IREE's own fusion)",
    parse=_groups, stage=IREE, make_pass=FusionGroupsPass)
