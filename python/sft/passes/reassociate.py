"""sft-reassociate: evaluate chains of contractions in the order a plan chose.

`orders` holds (op id of the chain's last contraction, order tree) pairs; see
`space/chains.py`. The chain's contractions are replaced by those of the chosen order, each
intermediate starting from a fresh zero fill of its shape; old fills go when nothing reads them.
Op ids are positions among the sft ops this pass sees.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, pairs
from ..decisions.orders import Tree, as_tree
from ..errors import IllegalPlan
from ..ir import tm
from ..space.chains import chain_sites
from . import indexing as ix
from .common import element_type, has_uses, maps_attr


def _contract(step, values, init, extents, ip):
    loops = step.loops
    maps = [ix.affine_map(len(loops), [ix.d(loops.index(i)) for i in t])
            for t in (step.lhs, step.rhs, step.out)]
    attrs = {"domain": tm.DenseI64ArrayAttr.get([extents[i] for i in loops]), "maps": maps_attr(maps)}
    return dialect.create("sft.contract", [values[i] for i in step.sources], attrs,
                          [init.type], init=init, ip=ip).results[0]


def _rewrite(site, tree) -> None:
    chain, last = site.chain, site.contractions[-1]
    values = list(site.values)
    ip = tm.InsertionPoint(last)
    ty = element_type(last.results[0])
    steps = chain.steps(tree)
    with last.location:
        for step in steps[:-1]:
            shape = [chain.extents[i] for i in step.out]
            fill = dialect.create_fill(site.zero, tm.RankedTensorType.get(shape, ty), ip)
            values.append(_contract(step, values, fill, chain.extents, ip))
        result = _contract(steps[-1], values, dialect.init(last), chain.extents, ip)
    last.results[0].replace_all_uses_with(result)
    fills = [dialect.init(op).owner for op in site.contractions[:-1]]
    for op in reversed(site.contractions):
        op.erase()
    for fill in fills:
        fill = getattr(fill, "operation", fill)
        if not has_uses(fill.results[0]):
            fill.erase()


@dataclass(frozen=True)
class ReassociatePass:
    """Evaluate chains of contractions in other orders: {orders=OP:TREE;...}, e.g. 3:(0,(1,2))."""

    orders: tuple[tuple[int, Tree], ...] = ()
    name = "sft-reassociate"

    @classmethod
    def from_options(cls, text: str) -> "ReassociatePass":
        """`orders=OP:TREE;OP:TREE`, a tree nesting pairs of operand numbers
        (sft-opt -p 'sft-reassociate{orders=3:(0,(1,2))}')."""
        key, _, value = text.partition("=")
        try:
            if key.strip() != "orders":
                raise ValueError
            orders = []
            for item in filter(str.strip, value.split(";")):
                op_id, _, tree = item.partition(":")
                orders.append((int(op_id), as_tree(ast.literal_eval(tree.strip()))))
            return cls(tuple(orders))
        except (ValueError, SyntaxError):
            raise IllegalPlan(f"sft-reassociate takes orders=OP:TREE;..., not '{text}'") from None

    def __call__(self, module) -> None:
        wanted = dict(self.orders)
        with module.context, tm.Location.unknown():
            sites = {s.chain.op_id: s for s in chain_sites(module)}
            for op_id, tree in wanted.items():
                if op_id not in sites:
                    raise IllegalPlan(f"plan reorders a chain at op {op_id}, which the program does not have")
                if not sites[op_id].chain.is_order(tree):
                    raise IllegalPlan(f"plan gives the chain at op {op_id} the order {tree}, which is "
                                      f"not a legal order of its {len(sites[op_id].chain.operands)} operands")
            # Last chain first: a later chain may read an earlier one's result, which the
            # earlier rewrite replaces (uses included) but a site's captured values would not.
            for op_id, tree in sorted(wanted.items(), reverse=True):
                if tree != sites[op_id].chain.written:
                    _rewrite(sites[op_id], tree)


def _orders(value, what: str) -> tuple[tuple[int, Tree], ...]:
    """[[op id, tree], ...] as (op id, order tree) pairs; a bad tree is an error naming it."""
    orders = []
    for i, (op, tree) in enumerate(pairs(value, what)):
        try:
            orders.append((op, as_tree(tree)))
        except ValueError:
            raise ValueError(f"{what}[{i}]: not an order tree: {json.dumps(tree)}") from None
    return tuple(orders)


KIND = DecisionKind(
    field="orders", type="tuple[tuple[int, Tree], ...]", default=(),
    doc="(op id of a chain's last contraction, order tree) for chains of contractions evaluated "
        "in another order than written (space/chains.py)",
    parse=_orders, stage=SFT, make_pass=ReassociatePass,
    describe=lambda orders: "chains reordered: " + ", ".join(f"op {op} as {tree}" for op, tree in orders))
