"""sft-sum-lone-loops: a contraction's summed loops that only one input reads, summed first.

sum_{s,k} a[s,k] b[k] = sum_k (sum_s a[s,k]) b[k]: a loop that one input alone reads (and the
result does not) is summed over that input on its own, by an sft.reduce, before the
contraction. IREE's CPU vectorizer refuses such contractions ("'vector.contract' op invalid
accumulator/result vector shape": a [2, 3] x [5] -> [3] einsum summing one loop of each input,
or two same-shaped tensors contracted to a scalar where one is a broadcast, which IREE fuses
into the contraction), and the products of the lone loops are work for nothing. Inputs are
read through the plain views (broadcasts, transposes) in front of them, as IREE's fusion will.

Run with the raise (`program.to_sft`): every program sft states has no lone loops, so op ids,
plans and the search all see the same program. Integer and float sums alike; the float terms
are the same products summed in another order (as reassociation's).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..ir import tm
from . import indexing as ix
from .common import element_type, functions, map_list, maps_attr, ops_of, static_shape


def _read(value, m):
    """(tensor, map) an input is read through: a plain view's source and the view's map
    composed with `m` where the input is such a view (a broadcast or a transpose), else its own."""
    owner = getattr(value.owner, "operation", value.owner)
    if getattr(owner, "name", "") == "sft.view" and dialect.padding(owner) is None:
        view_map = tm.AffineMapAttr(owner.attributes["map"]).value
        dims = ix.plain_dims(view_map)
        if dims is not None:
            return dialect.inputs(owner)[0], ix.affine_map(m.n_dims, [m.results[d] for d in dims])
    return value, m


def _lone(op) -> list | None:
    """Per input of contraction `op`, (tensor, its plain read dims, the lone loops it alone
    reads); None where no input has a lone loop or the rewrite does not apply (a map that is
    not plain, an input of another element type than the result's)."""
    maps = map_list(op.attributes["maps"])
    if any(ix.plain_dims(m) is None for m in maps):
        return None
    kept = set(ix.plain_dims(maps[-1]))
    reads = [_read(v, m) for v, m in zip(dialect.inputs(op), maps[:-1])]
    found = []
    for i, (value, m) in enumerate(reads):
        dims = ix.plain_dims(m)  # (plain: a plain map read through a plain view)
        others = {d for j, (_, n) in enumerate(reads) if j != i for d in ix.plain_dims(n)}
        lone = {d for d in dims if d not in kept and d not in others}
        if lone and (len(set(dims)) != len(dims) or element_type(value) != element_type(op.results[0])):
            return None
        found.append((value, dims, lone))
    return found if any(lone for _, _, lone in found) else None


def _sum_over(value, dims: list[int], lone: set[int], domain: list[int], ip):
    """An sft.reduce of `value` (read at loops `dims`) over its `lone` loops, from zero: a
    tensor of the loops it keeps, in their order in `dims`."""
    element = element_type(value)
    kept = [d for d in dims if d not in lone]
    zero_attr = (tm.FloatAttr.get(element, 0.0) if isinstance(element, tm.FloatType)
                 else tm.IntegerAttr.get(element, 0))
    zero = tm.Operation.create("arith.constant", results=[element], attributes={"value": zero_attr},
                               ip=ip).result
    out_type = tm.RankedTensorType.get([domain[d] for d in kept], element)
    init = dialect.create_fill(zero, out_type, ip)
    rank = len(dims)  # the reduce's loops are the input's dims, in order
    attrs = {"domain": tm.DenseI64ArrayAttr.get(static_shape(value)), "kind": tm.StringAttr.get("add"),
             "maps": maps_attr([ix.affine_map(rank, [ix.d(p) for p in range(rank)]),
                                ix.affine_map(rank, [ix.d(p) for p, d in enumerate(dims) if d not in lone])])}
    reduce = dialect.create("sft.reduce", [value], attrs, [out_type], init=init, regions=1, ip=ip)
    block = reduce.regions[0].blocks.append(element)
    with tm.InsertionPoint(block):
        tm.Operation.create("gpu.yield", operands=[block.arguments[0]])
    return reduce.results[0], kept


def sum_lone_loops(op, found: list) -> None:
    """Rewrite contraction `op` as the sums of its inputs' lone loops and the contraction of
    what they leave."""
    ip = tm.InsertionPoint(op)
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    maps = map_list(op.attributes["maps"])
    lone_all = set().union(*(lone for _, _, lone in found))
    renumber = {d: i for i, d in enumerate(d for d in range(len(domain)) if d not in lone_all)}
    new_map = lambda dims: ix.affine_map(len(renumber), [ix.d(renumber[d]) for d in dims])  # noqa: E731
    ins, in_maps = [], []
    with op.location:
        for (value, dims, lone), original, m in zip(found, dialect.inputs(op), maps):
            if lone:
                value, dims = _sum_over(value, dims, lone, domain, ip)
            elif not lone_all & set(ix.plain_dims(m)):  # reads no loop that goes: as it was
                value, dims = original, ix.plain_dims(m)
            ins.append(value)
            in_maps.append(new_map(dims))
        attrs = {"domain": tm.DenseI64ArrayAttr.get([domain[d] for d in renumber]),
                 "maps": maps_attr(in_maps + [new_map(ix.plain_dims(maps[-1]))])}
        new = dialect.create("sft.contract", ins, attrs, [op.results[0].type],
                             init=dialect.init(op), ip=ip)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


@dataclass(frozen=True)
class SumLoneLoopsPass:
    """Summed loops that one input of a contraction alone reads, summed over it first."""

    name = "sft-sum-lone-loops"

    def __call__(self, module) -> None:
        with module.context, tm.Location.unknown():
            for func in functions(module):
                for op in ops_of(func.regions[0].blocks[0]):
                    found = _lone(op) if op.name == "sft.contract" else None
                    if found is not None:
                        sum_lone_loops(op, found)
