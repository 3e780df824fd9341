"""sft-split-batch: the program for one part of its batch, run as `parts` calls side by side.

A program whose every output row depends only on the same rows of its batched
inputs can run as `parts` calls of the program for `1 / parts` of the batch, each on a core of
its own, one thread a call (IREE's local-sync): the cores meet once per call, where IREE's
parallel executor (local-task) meets once per dispatch. On a 2-core Zen 4 VM a cross-core
wake-up cost about 25 us; a 256-1024-256 MLP at batch 32 ran 423 us a call on one thread, 521
on local-task, and 251 as two halves side by side (`backend/parts.py`).

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
from .split_join import clone_function, join_functions, join_groups, join_name, set_results


def _divided(ty, dim: int, parts: int):
    t = tm.RankedTensorType(ty)
    shape = list(t.shape)
    shape[dim] //= parts
    return tm.RankedTensorType.get(shape, t.element_type)


def split_batch(module, parts: int, args: tuple[int, ...]) -> None:
    """Rewrite `module` into the program of one of `parts` parts (and, where it sums over its
    batch, the join functions after it: `split_join.py`)."""
    with module.context, tm.Location.unknown():
        an = analyse(module, parts, args)
        func = functions(module)[0]
        if an.sums:  # the joins from the function as it is, before its part is made
            join = clone_function(func, join_name(func, 0))
            join_functions(join, analyse_function(join, parts, args), parts, args)
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
    part of the batch runs the entry (the part function) on its rows of the arguments at
    `batched`; it returns the whole's results that carry the batch (joined along `joins`), then
    `sums` partial sums. Where it has sums, the join functions `join_entries` (side by side)
    each take the whole's arguments but the batched ones, then each sum's partials (every
    part's in turn), and return the whole's other results at `join_groups` (positions among
    those). Without sums, those are the same in every part: the first part's are taken."""

    joins: tuple  # per result of the whole: the dim its parts join along, or None
    batched: tuple[int, ...]
    sums: int = 0
    join_entries: tuple[str, ...] = ()
    join_groups: tuple[tuple[int, ...], ...] = ()

    def updates_once(self, updates) -> bool:
        """Whether the results at `updates` (new state, donated inputs' new values) are each
        computed once, by a join function: never by every part, nor joined from the parts."""
        return not updates or (self.sums > 0 and all(self.joins[i] is None for i in updates))


def split_layout(module, split: tuple[int, ...]) -> SplitLayout:
    """The layout of `module`'s entry split as `split` (parts, arguments...)."""
    with module.context:
        func = functions(module)[0]
        an = analyse(module, split[0], tuple(split[1:]))
        if not an.sums:
            return SplitLayout(tuple(an.results), tuple(split[1:]))
        returned = ops_of(func.regions[0].blocks[0])[-1].operands
        groups = join_groups([v.type for v, dim in zip(returned, an.results) if dim is None], split[0])
        return SplitLayout(tuple(an.results), tuple(split[1:]), len(an.sums),
                           tuple(join_name(func, k) for k in range(len(groups))), groups)


@dataclass(frozen=True)
class SplitBatchPass:
    """The program of one part of its batch: {parts=N args=I,J} (the batched arguments)."""

    split: tuple[int, ...] = ()  # (parts, argument, argument, ...)
    name = "sft-split-batch"

    @classmethod
    def from_options(cls, text: str) -> "SplitBatchPass":
        """`parts=2 args=3,4` (sft-opt -p 'sft-split-batch{parts=2 args=3}')."""
        try:
            options = dict(item.split("=", 1) for item in text.split())
            parts = int(options.pop("parts"))
            args = tuple(int(x) for x in options.pop("args").split(",") if x.strip())
            if options:
                raise ValueError
        except (KeyError, ValueError):
            raise IllegalPlan(f"{cls.name} takes parts=N args=I,J,..., not '{text}'") from None
        return cls((parts, *args))

    def __call__(self, module) -> None:
        split_batch(module, self.split[0], tuple(self.split[1:]))


KIND = DecisionKind(
    field="batch_split", type="tuple[int, ...]", default=(),
    doc="(parts, argument, ...): the program for 1/parts of the batch (dim 0 of those entry "
        "arguments), run as that many calls side by side on one thread each",
    parse=ints, stage=SFT, make_pass=SplitBatchPass,
    describe=lambda split: f"batch in {split[0]} parts side by side")
