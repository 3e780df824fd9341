"""sft-expand-batch: run a contraction over the batch dims its operands were collapsed from.

PyTorch's batched matmul of [B, H, n, d] tensors reaches the contraction through a reshape to
[B*H, n, d], and usually a transpose before that (heads split from the hidden dim). The reshape
stands between the transpose and the contraction, so IREE materialises the transpose as a
dispatch of its own. Splitting the contraction's batch loop back into (B, H) lets it read the
reshape's source directly; IREE then folds the transposes into the contraction.

`ops` lists the contractions to expand, by op id among the sft ops the pass sees. An operand that
was not collapsed is read through a new expand view, a result that is not expanded again right
after gets a collapse view: both are reshapes, free in IREE.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..ir import tm
from . import indexing as ix
from ..decisions.kind import SFT, DecisionKind, ints
from .common import (compute_ops, element_type, has_uses, map_list, maps_attr, op_ids_option,
                     operation, rewrite_ops, static_shape)


def _plain(op) -> list[list[int]] | None:
    maps = [ix.plain_dims(m) for m in map_list(op.attributes["maps"])]
    return None if None in maps or len(maps) != 3 else maps


def _view(value, kind: str):
    """(view op, source, groups) when `value` is made by an sft.view that is a reshape of
    `kind` ('collapse' or 'expand'), else None."""
    op = operation(value.owner)
    if getattr(op, "name", "") != "sft.view" or dialect.padding(op) is not None:
        return None
    source = dialect.inputs(op)[0]
    shape = ix.reshape_groups(tm.AffineMapAttr(op.attributes["map"]).value,
                              static_shape(source), static_shape(value))
    return (op, source, shape[1]) if shape and shape[0] == kind else None


def batch_splits(op) -> dict[int, tuple[int, ...]] | None:
    """For each batch loop of a contraction whose operand comes from a reshape that merged it,
    the extents it was merged from; None when there is none."""
    maps = _plain(op) if op.name == "sft.contract" else None
    if maps is None:
        return None
    splits = {}
    for value, used in zip(dialect.inputs(op), maps):
        found = _view(value, "collapse")
        if found is None:
            continue
        _, source, groups = found
        for pos, dim in enumerate(used):
            if dim in maps[2] and all(dim in m for m in maps[:2]) and len(groups[pos]) > 1:
                splits.setdefault(dim, tuple(static_shape(source)[s] for s in groups[pos]))
    return splits or None


def _split(sizes, parts_at: dict[int, tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """`sizes` with the entries at the keys of `parts_at` split into those parts, and for each
    old entry the positions it became."""
    new, groups = [], []
    for pos, size in enumerate(sizes):
        parts = parts_at.get(pos, (size,))
        groups.append(list(range(len(new), len(new) + len(parts))))
        new += parts
    return new, groups


def _expanded(value, positions: dict[int, tuple[int, ...]], ip):
    """`value` with the dims at `positions` split into the given extents: the source of the
    collapse view that made it when that is exactly this split, else an expand view of it."""
    new_shape, groups = _split(static_shape(value), positions)
    found = _view(value, "collapse")
    if found is not None and static_shape(found[1]) == new_shape and found[2] == groups:
        return found[1]
    ty = tm.RankedTensorType.get(new_shape, element_type(value))
    view_map = tm.AffineMapAttr.get(ix.expand_map(new_shape, groups))
    return dialect.create("sft.view", [value], {"map": view_map}, [ty], ip=ip).results[0]


def expand(op, splits: dict[int, tuple[int, ...]]) -> None:
    maps = _plain(op)
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    new_domain, loops = _split(domain, splits)
    new_maps = [ix.affine_map(len(new_domain), [ix.d(n) for dim in m for n in loops[dim]]) for m in maps]

    def positions(m):
        return {pos: splits[dim] for pos, dim in enumerate(m) if dim in splits}

    ip = tm.InsertionPoint(op)
    with op.location:
        ins = [_expanded(v, positions(m), ip) for v, m in zip(dialect.inputs(op), maps)]
        init = dialect.init(op)
        scalar = dialect.fill_value(operation(init.owner))
        out_shape, groups = _split([domain[d] for d in maps[2]], positions(maps[2]))
        out_type = tm.RankedTensorType.get(out_shape, element_type(init))
        new_init = (dialect.create_fill(scalar, out_type, ip) if scalar is not None
                    else _expanded(init, positions(maps[2]), ip))
        attrs = {"domain": tm.DenseI64ArrayAttr.get(new_domain), "maps": maps_attr(new_maps)}
        result = dialect.create("sft.contract", ins, attrs, [out_type], init=new_init, ip=ip).results[0]
        uses = list(op.results[0].uses)
        user = operation(uses[0].owner) if len(uses) == 1 else None
        reshaped = (_view(user.results[0], "expand") if user is not None and len(user.results) == 1
                    else None)  # a user with no result (func.return) undoes nothing
        if reshaped and reshaped[2] == groups and static_shape(user.results[0]) == out_shape:
            user.results[0].replace_all_uses_with(result)  # expanded right after: nothing to undo
            user.erase()
        else:
            view_map = tm.AffineMapAttr.get(ix.collapse_map(out_shape, groups))
            collapsed = dialect.create("sft.view", [result], {"map": view_map}, [op.results[0].type],
                                       ip=tm.InsertionPoint(op)).results[0]
            op.results[0].replace_all_uses_with(collapsed)
    old = []  # each producer once: the init may be an input too (erased twice: a segfault)
    for v in list(dialect.inputs(op)) + [init]:
        producer = operation(v.owner)
        if not any(producer == seen for seen in old):
            old.append(producer)
    op.erase()
    for producer in old:
        if isinstance(producer, tm.Operation) and producer.name in ("sft.view", "sft.map") \
                and not any(has_uses(r) for r in producer.results):
            producer.erase()


@dataclass(frozen=True)
class ExpandBatchPass:
    """Run contractions over the batch dims their operands were merged from: {ops=ID,...}."""

    ops: tuple[int, ...] = ()
    name = "sft-expand-batch"

    @classmethod
    def from_options(cls, text: str) -> "ExpandBatchPass":
        """`ops=ID,ID` (sft-opt -p 'sft-expand-batch{ops=40,59}')."""
        return cls(op_ids_option(cls.name, text))

    def __call__(self, module) -> None:
        # (the splits read again as each applies: an earlier expansion may have moved a view)
        rewrite_ops(module, self.ops, batch_splits, lambda op, _: expand(op, batch_splits(op)),
                    "plan expands the batch of op {}, which is not a contraction over a collapsed batch")


def expandable(module) -> tuple[int, ...]:
    """Op ids of the contractions sft-expand-batch can rewrite."""
    with module.context:
        return tuple(i for i, op in enumerate(compute_ops(module)) if batch_splits(op) is not None)


KIND = DecisionKind(
    field="expand", type="tuple[int, ...]", default=(),
    doc="contractions (op ids) run over the batch dims their operands were collapsed from",
    parse=ints, stage=SFT, make_pass=ExpandBatchPass,
    describe=lambda ops: f"batch expanded on ops {list(ops)}")
