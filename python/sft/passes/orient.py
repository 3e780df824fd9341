"""sft-orient: compute a contraction in the layout its readers take it in.

Autodiff writes a weight's gradient as a contraction followed by a transpose: JAX's
`dot_general` gives dW^T [out, in] and a transpose makes it [in, out] for the update of a weight
stored [in, out]. IREE fuses the transpose and the optimizer's elementwise update into the
contraction's dispatch, where the update then runs in the contraction's tile order: it reads
the weight and its state across their rows and writes them the same way. Measured on a 2-core
Zen 4 (one thread, the SGD-momentum update of a 256x1024 weight fused with its 32-step
gradient): 636 us with the transposed update against 391 us with the contraction computed as
[in, out] (docs/results.md, "Contractions in their readers' layout").

Orienting is a relabelling of the contraction's loops: the same products summed, its result
written in the transposed layout, so the transpose disappears. `ops` lists the contractions
to orient, by op id: each must have a fill as init and only transposing views (all the same
permutation) as readers. The readers of those views then read the new result directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, ints
from ..ir import tm
from . import indexing as ix
from .common import (compute_ops, has_uses, map_list, maps_attr, op_ids_option, operation,
                     rewrite_ops, view_permutation)


def transposing_readers(op) -> tuple[list, list[int]] | None:
    """(the views, their permutation) when `op` is a contraction with a fill as init whose
    every reader is a transposing view by one and the same permutation, else None."""
    if op.name != "sft.contract" or dialect.fill_value(operation(dialect.init(op).owner)) is None:
        return None
    maps = [ix.plain_dims(m) for m in map_list(op.attributes["maps"])]
    if None in maps or len(maps) != 3:
        return None
    views = [operation(use.owner) for use in op.results[0].uses]
    perms = [view_permutation(v) for v in views]
    if not views or None in perms or any(p != perms[0] for p in perms):
        return None
    return views, perms[0]


def orient(op, views: list, perm: list[int]) -> None:
    """Rewrite `op` to produce its result permuted by `perm`, its loops renumbered so that the
    result's loops come first, in order (a plain contraction to IREE and the kernel search)."""
    maps = [ix.plain_dims(m) for m in map_list(op.attributes["maps"])]
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    out = [maps[2][p] for p in perm]
    order = out + [d for d in range(len(domain)) if d not in out]  # new loop i is old loop order[i]
    new_of = {old: new for new, old in enumerate(order)}
    ins, in_maps = list(dialect.inputs(op)), [[new_of[d] for d in m] for m in maps[:2]]
    if 0 not in in_maps[0] and 0 in in_maps[1]:
        # the operand that walks the result's rows goes first, as in a matmul (the products
        # are the same: x * y == y * x), so that IREE still sees one and not a matmul_like
        ins, in_maps = ins[::-1], in_maps[::-1]
    new_maps = [ix.affine_map(len(domain), [ix.d(d) for d in m]) for m in (*in_maps, range(len(out)))]
    ip = tm.InsertionPoint(op)
    with op.location:
        old_fill = operation(dialect.init(op).owner)
        result_type = views[0].results[0].type
        init = dialect.create_fill(dialect.fill_value(old_fill), result_type, ip)
        attrs = {"domain": tm.DenseI64ArrayAttr.get([domain[d] for d in order]),
                 "maps": maps_attr(new_maps)}
        result = dialect.create("sft.contract", ins, attrs, [result_type],
                                init=init, ip=ip).results[0]
    for view in views:
        view.results[0].replace_all_uses_with(result)
        view.erase()
    op.erase()
    if not any(has_uses(r) for r in old_fill.results):
        old_fill.erase()


@dataclass(frozen=True)
class OrientPass:
    """Compute contractions in their readers' layout: {ops=ID,...}."""

    ops: tuple[int, ...] = ()
    name = "sft-orient"

    @classmethod
    def from_options(cls, text: str) -> "OrientPass":
        """`ops=ID,ID` (sft-opt -p 'sft-orient{ops=12}')."""
        return cls(op_ids_option(cls.name, text))

    def __call__(self, module) -> None:
        rewrite_ops(module, self.ops, transposing_readers, lambda op, found: orient(op, *found),
                    "plan orients op {}, which is not a contraction read only through one transpose")


def orientable(module) -> tuple[int, ...]:
    """Op ids of the contractions sft-orient can rewrite."""
    with module.context:
        return tuple(i for i, op in enumerate(compute_ops(module))
                     if transposing_readers(op) is not None)


KIND = DecisionKind(
    field="orient", type="tuple[int, ...]", default=(),
    doc="contractions (op ids) computed in the transposed layout their readers take them in",
    parse=ints, stage=SFT, make_pass=OrientPass,
    describe=lambda ops: f"oriented ops {list(ops)}")
