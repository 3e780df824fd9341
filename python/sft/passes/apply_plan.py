"""sft-apply-plan: impose a Plan on lowered linalg, in IREE's context.

Each fusion group becomes one `flow.dispatch.region` (IREE keeps such regions as they are), and
each tiled kernel root gets a `compilation_info` attribute. The `sft.op` ids are dropped after.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IllegalPlan
from ..ir import iree_ir
from ..plan import Plan
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
class ApplyPlanPass:
    plan: Plan
    name = "sft-apply-plan"

    def __call__(self, module) -> None:
        with module.context, iree_ir.Location.unknown():
            found = _ops_by_id(module)
            ops = {i: op for i, (op, _) in found.items()}
            for op_id, tiles in self.plan.tiles:
                if op_id not in ops:
                    raise IllegalPlan(f"plan tiles op {op_id}, which the program does not have")
                if not _reductions_innermost(ops[op_id]):
                    raise IllegalPlan(f"plan tiles op {op_id}, whose summed loops are not "
                                      "innermost: IREE reorders its loops, the tiles would not apply")
                ops[op_id].attributes["compilation_info"] = iree_ir.Attribute.parse(tiles.attribute())
            for group in self.plan.groups:
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
