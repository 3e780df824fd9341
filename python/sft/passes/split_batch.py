"""sft-split-batch: the program for one part of its batch, run as `parts` calls side by side.

A program whose every output row depends only on the same rows of its batched
inputs can run as `parts` calls of the program for `1 / parts` of the batch, each on a core of
its own, one thread a call (IREE's local-sync): the cores meet once per call, where IREE's
parallel executor (local-task) meets once per dispatch. On a 2-core Zen 4 VM a cross-core
wake-up cost about 25 us; a 256-1024-256 MLP at batch 32 ran 423 us a call on one thread, 521
on local-task, and 251 as two halves side by side (`backend/parts.py`).

The "batch" is whatever dim the cut arguments carry: dim 0 of the inputs (`Plan.batch_split`),
or a dim the weights share (`Plan.weight_split`): the rows of one layer's weight and bias and
the columns of the next one's, so that each part computes its share of the hidden units and
sums its share of the next layer, and a join adds the partial sums (Megatron's split). Each
part then holds half the weights: a 256-1024-256 MLP at batch 32 on the 2-core Xeon VM ran
213-238 us a call split so, 261-268 with its batch split and 331-369 whole on one thread.

The split is sound only where the program says so: `split_proof.py` proves it from the
index maps, or refuses it naming the op.

The rewrite divides each batch-carrying dim (and each uniform one read by a batch loop) by
`parts`, in the value's type and the op's domain; maps are unchanged. The program's results
are each part's results joined along the dim the batch is carried in, or the join functions'
(`SplitLayout`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, ints
from ..errors import IllegalPlan
from ..ir import tm
from . import indexing as ix
from .common import functions, operation, ops_of, static_shape
from .split_proof import analyse, analyse_function, splat_of
from .split_join import (clone_function, join_arguments, join_functions, join_groups, join_name,
                         set_results)


def _divided(ty, dim: int, parts: int):
    t = tm.RankedTensorType(ty)
    shape = list(t.shape)
    shape[dim] //= parts
    return tm.RankedTensorType.get(shape, t.element_type)


def split_batch(module, parts: int, cuts: tuple[tuple[int, int], ...]) -> None:
    """Rewrite `module` into the program of one of `parts` parts of the batch its arguments
    carry at `cuts` ((argument, dim), ...), and where it sums over its batch, the join
    functions after it (`split_join.py`)."""
    with module.context, tm.Location.unknown():
        an = analyse(module, parts, cuts)
        func = functions(module)[0]
        if an.sums:  # the joins from the function as it is, before its part is made
            join = clone_function(func, join_name(func, 0))
            join_functions(join, analyse_function(join, parts, cuts), parts)
        for value, reads in an.whole_reads.items():  # a copy kept whole for them
            copy = operation(value.owner).clone(ip=tm.InsertionPoint(operation(value.owner)))
            for reader, position in reads:
                reader.operands[position] = copy.results[0]
        for value, dim in [*((v, c.dim) for v, c in an.carry.items()), *an.halve.items()]:
            value.set_type(_divided(value.type, dim, parts))
            splat = splat_of(operation(value.owner))
            if splat is not None:
                operation(value.owner).attributes["value"] = tm.DenseElementsAttr.get_splat(
                    value.type, splat.get_splat_value())
        for op, loop in an.domains:
            domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
            domain[loop] //= parts
            op.attributes["domain"] = tm.DenseI64ArrayAttr.get(domain)
        for view, kind, groups in an.reshapes:  # the same reshape of the new shapes
            src, dst = static_shape(dialect.inputs(view)[0]), static_shape(view.results[0])
            view.attributes["map"] = tm.AffineMapAttr.get(
                ix.expand_map(dst, groups) if kind == "expand" else ix.collapse_map(src, groups))
        # the part returns the results that carry its batch, then its partial sums (or, where
        # it has none, the other results)
        returned = list(zip(ops_of(func.regions[0].blocks[0])[-1].operands, an.results))
        set_results(func, [v for v, dim in returned if dim is not None]
                    + (an.sums or [v for v, dim in returned if dim is None]))


@dataclass(frozen=True)
class SplitLayout:
    """How a split program's calls make the whole one's results (`backend/parts.py`): each
    part runs the entry (the part function) on its share of the arguments cut at `cuts`
    ((argument, dim), ...: a batch's rows, or a layer's columns and the next one's rows); it
    returns the whole's results that carry the batch (joined along `joins`), then `sums`
    partial sums. Where it has sums, the join functions `join_entries` (side by side) each take
    the whole's arguments at `join_args` (those they read; never a cut one), then each sum's
    partials (every part's in turn), and return the whole's other results at `join_groups`
    (positions among those). Without sums, those are the same in every part: the first
    part's are taken. `updates`: the results that are new state (a training step's)."""

    joins: tuple  # per result of the whole: the dim its parts join along, or None
    cuts: tuple[tuple[int, int], ...]
    sums: int = 0
    join_entries: tuple[str, ...] = ()
    join_groups: tuple[tuple[int, ...], ...] = ()
    updates: tuple[int, ...] = ()
    join_args: tuple[int, ...] = ()

    def updates_once(self) -> bool:
        """Whether the new state is computed once, by a join function: never by every part,
        nor joined from the parts."""
        return not self.updates or (self.sums > 0 and all(self.joins[i] is None for i in self.updates))


def split_layout(module, split: tuple, updates: tuple[int, ...] = ()) -> SplitLayout:
    """The layout of `module`'s entry split as `split` ((parts, cuts): `split_of`), where the
    results at `updates` are new state."""
    parts, cuts = split
    with module.context:
        func = functions(module)[0]
        an = analyse(module, parts, cuts)
        if not an.sums:
            return SplitLayout(tuple(an.results), cuts, updates=tuple(updates))
        returned = ops_of(func.regions[0].blocks[0])[-1].operands
        groups = join_groups([v.type for v, dim in zip(returned, an.results) if dim is None], parts)
        return SplitLayout(tuple(an.results), cuts, len(an.sums),
                           tuple(join_name(func, k) for k in range(len(groups))), groups,
                           tuple(updates), join_arguments(func, an))


def split_of(plan) -> tuple | None:
    """(parts, ((argument, dim), ...)) of `plan`'s split, of its batch or of its weights; None
    where it has none."""
    if plan.batch_split and plan.weight_split:
        raise IllegalPlan("a plan splits its batch or its weights, not both")
    if plan.batch_split:
        return _batch_cuts(plan.batch_split)
    return _weight_cuts(plan.weight_split) if plan.weight_split else None


def _batch_cuts(split: tuple[int, ...]) -> tuple:
    """(parts, argument, ...) as (parts, ((argument, 0), ...))."""
    return split[0], tuple((a, 0) for a in split[1:])


def _weight_cuts(split: tuple[int, ...]) -> tuple:
    """(parts, argument, dim, ...) as (parts, ((argument, dim), ...))."""
    return split[0], tuple(zip(split[1::2], split[2::2]))


@dataclass(frozen=True)
class SplitBatchPass:
    """The program of one part of its batch: {parts=N args=I,J} (dim 0 of those arguments),
    {parts=N args=I:D,...} (dim D of argument I)."""

    parts: int = 2
    cuts: tuple[tuple[int, int], ...] = ()  # (argument, dim), ...
    name = "sft-split-batch"

    @classmethod
    def from_options(cls, text: str) -> "SplitBatchPass":
        """`parts=2 args=3,4` or `parts=2 args=0:0,1:0,2:1` (sft-opt -p 'sft-split-batch{...}')."""
        try:
            options = dict(item.split("=", 1) for item in text.split())
            parts = int(options.pop("parts"))
            cuts = tuple((int(a), int(d)) for a, _, d in (
                (x + ":0" if ":" not in x else x).partition(":")
                for x in options.pop("args").split(",") if x.strip()))
            if options:
                raise ValueError
        except (KeyError, ValueError):
            raise IllegalPlan(f"{cls.name} takes parts=N args=I,J,... (or I:DIM,...), not '{text}'") from None
        return cls(parts, cuts)

    def __call__(self, module) -> None:
        split_batch(module, self.parts, self.cuts)


def _weight_split(value, what: str) -> tuple[int, ...]:
    value = ints(value, what)
    if len(value) % 2 != 1:
        raise ValueError(f"{what} must be [parts, argument, dim, argument, dim, ...]")
    return value


KIND = DecisionKind(
    field="batch_split", type="tuple[int, ...]", default=(),
    doc="(parts, argument, ...): the program for 1/parts of the batch (dim 0 of those entry "
        "arguments), run as that many calls side by side on one thread each",
    parse=ints, stage=SFT, make_pass=lambda split: SplitBatchPass(*_batch_cuts(split)),
    describe=lambda split: f"batch in {split[0]} parts side by side")

WEIGHT_KIND = DecisionKind(
    field="weight_split", type="tuple[int, ...]", default=(),
    doc="(parts, argument, dim, argument, dim, ...): the program for 1/parts of a dim its "
        "weights share (a layer's outputs, the next one's inputs), each part holding its share "
        "of those weights, run side by side on one thread each; a join adds their partial sums",
    parse=_weight_split, stage=SFT,
    make_pass=lambda split: SplitBatchPass(*_weight_cuts(split)),
    describe=lambda split: f"weights in {split[0]} parts side by side")
