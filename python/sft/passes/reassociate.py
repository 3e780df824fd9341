"""sft-reassociate: evaluate chains of contractions in the order a plan chose.

`orders` holds (op id of the chain's second contraction, order) pairs; see `space/chains.py`.
The two contractions are replaced by the two of the chosen order, the intermediate starting from
a fresh zero fill of its shape; the first contraction's old fill goes when nothing else reads it.
Op ids are positions among the sft ops this pass sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..errors import IllegalPlan
from ..ir import tm
from ..space.chains import INTERMEDIATE, PAIRINGS, chain_sites
from . import indexing as ix
from .common import element_type, functions, has_uses, maps_attr


def _contract(step, values, init, extents, ip):
    loops = step.loops
    maps = [ix.affine_map(len(loops), [ix.d(loops.index(i)) for i in t])
            for t in (step.lhs, step.rhs, step.out)]
    attrs = {"domain": tm.DenseI64ArrayAttr.get([extents[i] for i in loops]), "maps": maps_attr(maps)}
    return dialect.create("sft.contract", [values[i] for i in step.sources], attrs,
                          [init.type], init=init, ip=ip).results[0]


def _rewrite(site, order: int) -> None:
    chain, first, second = site.chain, site.first, site.second
    step1, step2 = chain.steps(order)
    values = {0: site.x, 1: site.y, 2: site.z}
    ip = tm.InsertionPoint(second)
    with second.location:
        old_fill = dialect.init(first).owner
        shape = [chain.extents[i] for i in step1.out]
        fill = dialect.create_fill(dialect.fill_value(old_fill),
                                   tm.RankedTensorType.get(shape, element_type(first.results[0])), ip)
        values[INTERMEDIATE] = _contract(step1, values, fill, chain.extents, ip)
        result = _contract(step2, values, dialect.init(second), chain.extents, ip)
    second.results[0].replace_all_uses_with(result)
    second.erase()
    first.erase()
    if not has_uses(old_fill.results[0]):
        old_fill.erase()


@dataclass(frozen=True)
class ReassociatePass:
    """Evaluate each listed chain in its chosen order (0 leaves it as written)."""

    orders: tuple[tuple[int, int], ...] = ()
    name = "sft-reassociate"

    @classmethod
    def from_options(cls, text: str) -> "ReassociatePass":
        """`orders=OP:ORDER,OP:ORDER` (sft-opt -p 'sft-reassociate{orders=30:1}')."""
        key, _, value = text.partition("=")
        try:
            if key.strip() != "orders":
                raise ValueError
            pairs = [tuple(int(x) for x in item.split(":")) for item in value.split(",") if item.strip()]
            if any(len(p) != 2 for p in pairs):
                raise ValueError
            return cls(tuple(pairs))
        except ValueError:
            raise IllegalPlan(f"sft-reassociate takes orders=OP:ORDER,..., not '{text}'") from None

    def __call__(self, module) -> None:
        wanted = dict(self.orders)
        with module.context, tm.Location.unknown():
            for func in functions(module):
                sites = {s.chain.op_id: s for s in chain_sites(func.regions[0].blocks[0])}
                for op_id, order in wanted.items():
                    if op_id not in sites:
                        raise IllegalPlan(f"plan reorders a chain at op {op_id}, which the program does not have")
                    if order not in range(len(PAIRINGS)) or order not in sites[op_id].chain.legal_orders():
                        raise IllegalPlan(f"plan gives the chain at op {op_id} order {order}, which is not legal")
                for op_id, order in wanted.items():
                    if order:
                        _rewrite(sites[op_id], order)
