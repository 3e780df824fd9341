"""sft-split-batch: the program for one part of its batch, run as `parts` calls side by side.

An inference program whose every output row depends only on the same rows of its batched
inputs can run as `parts` calls of the program for `1 / parts` of the batch, each on a core of
its own, one thread a call (IREE's local-sync): the cores meet once per call, where IREE's
parallel executor (local-task) meets once per dispatch. On a 2-core Zen 4 VM a cross-core
wake-up cost about 25 us; a 256-1024-256 MLP at batch 32 ran 423 us a call on one thread, 521
on local-task, and 251 as two halves side by side (`backend/runtime.py::SplitCall`).

The split is sound only where the program says so, and this pass proves it from the index
maps: a loop is the batch loop of an op where an input carrying the batch reads it, plainly,
at the carried dim; every other read of that loop must be of a value constant along the dim
it reads (a fill, a broadcast: `_uniform`), the loop is never summed and the body never reads
its index, and the result carries the batch where its map writes that loop. A view carries
the batch through permutations, broadcasts and reshapes that keep it the outermost factor of
its dim; an op the pass does not know (sft.opaque) must not read it. Anything else (a mean
over the batch, a batch-sized constant, a slice of the batch) refuses the split.

The rewrite divides each batch-carrying dim (and each uniform one read by a batch loop) by
`parts`, in the value's type and the op's domain; maps are unchanged. The program's results
are each part's results joined along the dim the batch is carried in (`result_dims`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, ints
from ..errors import IllegalPlan
from ..ir import tm, where
from . import indexing as ix
from .common import functions, map_list, operation, ops_of, static_shape


class _Refused(Exception):
    """Why the program cannot be split (the message)."""


@dataclass(frozen=True)
class _Carry:
    """Where a value holds the batch: dim `dim` is [outer, batch, inner] in row-major order
    (`inner` elements a batch index; outer: the rest), so that a part is every `outer` slice's
    run of its batch indices. Entry arguments carry it at dim 0 with inner 1 and outer 1."""

    dim: int
    inner: int


@dataclass
class _Analysis:
    batch: int  # the batch's extent (dim 0 of the batched arguments)
    carry: dict = field(default_factory=dict)  # value -> _Carry
    # value not carrying the batch, constant along a dim -> that dim
    halve: dict = field(default_factory=dict)
    # (op, its batch loop) of each reduce and contract that has one
    domains: list = field(default_factory=list)
    # (value in `halve`, the op reading it at its batch loop)
    divided_reads: list = field(default_factory=list)
    # (view, kind, groups) of each reshape whose shapes change
    reshapes: list = field(default_factory=list)
    # per function result: the dim its parts join along, or None
    results: list = field(default_factory=list)


def _splat(op):
    """The attribute of an arith.constant tensor with one value everywhere, or None."""
    if getattr(op, "name", "") != "arith.constant":
        return None
    attr = op.attributes["value"]
    return attr if isinstance(attr, tm.DenseElementsAttr) and attr.is_splat else None


def _uniform(value, memo: dict) -> set[int]:
    """Dims along which `value` is the same everywhere (a fill or a splat constant: all; a
    view: the result dims its map does not read, and those it reads plainly at a uniform
    source dim)."""
    if value in memo:
        return memo[value]
    owner = operation(value.owner)
    found: set[int] = set()
    shape = static_shape(value) or []
    if dialect.fill_value(owner) is not None or _splat(owner) is not None:
        found = set(range(len(shape)))
    elif getattr(owner, "name", "") == "sft.view" and dialect.padding(owner) is None:
        view_map = tm.AffineMapAttr(owner.attributes["map"]).value
        source_uniform = _uniform(dialect.inputs(owner)[0], memo)
        for r in range(len(shape)):
            reads = [(p, e) for p, e in enumerate(view_map.results) if r in ix.dims_of(e)]
            if all(ix.plain_dim(e) == r and p in source_uniform for p, e in reads):
                found.add(r)
    memo[value] = found
    return found


def _index_dims(op) -> set[int]:
    """The loop dims an op's body reads with sft.index."""
    if not op.regions or not op.regions[0].blocks:
        return set()
    return {tm.IntegerAttr(o.attributes["dim"]).value for o in ops_of(op.regions[0].blocks[0])
            if o.name == "sft.index"}


def _view_carry(op, carry: _Carry, an: _Analysis) -> _Carry:
    """Where sft.view `op`'s result carries the batch its source carries as `carry`."""
    if dialect.padding(op) is not None:
        raise _Refused("a padded view of the batch")
    view_map = tm.AffineMapAttr(op.attributes["map"]).value
    src, dst = static_shape(dialect.inputs(op)[0]), static_shape(op.results[0])
    exprs = list(view_map.results)
    r = ix.plain_dim(exprs[carry.dim])
    if r is not None:  # a permutation or a broadcast: the dim moves whole
        if dst[r] != src[carry.dim] or any(r in ix.dims_of(e) for p, e in enumerate(exprs) if p != carry.dim):
            raise _Refused("a view that slices the batch or reads it twice")
        return _Carry(r, carry.inner)
    reshape = ix.reshape_groups(view_map, src, dst)
    if reshape is None:
        raise _Refused("a view that reads the batch other than plainly or as a reshape")
    kind, groups = reshape
    an.reshapes.append((op, kind, groups))
    if kind == "collapse":  # the carried dim becomes a digit of the merged one
        r = next(i for i, g in enumerate(groups) if carry.dim in g)
        after = groups[r][groups[r].index(carry.dim) + 1:]
        return _Carry(r, carry.inner * prod(src[s] for s in after))
    group = groups[carry.dim]  # the carried dim is spread over `group`: the batch must fit one
    for j, r in enumerate(group):
        stride = prod(dst[q] for q in group[j + 1:])
        if carry.inner % stride == 0 and (stride * dst[r]) % (carry.inner * an.batch) == 0:
            return _Carry(r, carry.inner // stride)
    raise _Refused("a reshape that spreads the batch over two dims")


def _op_carry(op, an: _Analysis, memo: dict) -> None:
    """The batch loop of a map, reduce or contract, checked, and where its result carries it."""
    ins = dialect.inputs(op)
    result = op.results[0]
    rank = len(static_shape(result) or [])
    maps = map_list(op.attributes["maps"])
    if op.name == "sft.map":
        out_map = ix.affine_map(rank, [ix.d(i) for i in range(rank)])
        reads = list(zip(ins, maps))
    else:
        out_map = maps[-1]
        reads = list(zip(ins, maps[:-1])) + [(dialect.init(op), out_map)]
    loops = {}
    for value, m in reads:
        if value in an.carry:
            e = m.results[an.carry[value].dim]
            if ix.plain_dim(e) is None:
                raise _Refused("an op reads the batch through an index expression")
            loops[ix.plain_dim(e)] = an.carry[value].inner
    if not loops:
        return
    if len(loops) > 1 or len({an.carry[v].inner for v, _ in reads if v in an.carry}) > 1:
        raise _Refused("an op reads the batches of two inputs in different ways")
    (loop, inner), = loops.items()
    if loop in _index_dims(op):
        raise _Refused("an op's body reads the batch loop's index")
    for value, m in reads:
        positions = [p for p, e in enumerate(m.results) if loop in ix.dims_of(e)]
        if value in an.carry:
            if positions != [an.carry[value].dim]:
                raise _Refused("an op reads the batch loop at two dims of one input")
            continue
        for p in positions:
            if ix.plain_dim(m.results[p]) != loop or p not in _uniform(value, memo):
                raise _Refused("an op reads its batch loop from a value that is not split "
                               "(a batch-sized constant or parameter)")
            if an.halve.setdefault(value, p) != p:
                raise _Refused("a value divided along two dims")
            an.divided_reads.append((value, op))
    written = [p for p, e in enumerate(out_map.results) if loop in ix.dims_of(e)]
    if len(written) != 1 or ix.plain_dim(out_map.results[written[0]]) != loop:
        raise _Refused("an op sums over the batch (a mean or a norm across it)")
    an.carry[result] = _Carry(written[0], inner)
    if op.name != "sft.map":
        an.domains.append((op, loop))


def _walk(block, an: _Analysis) -> None:
    memo: dict = {}
    for op in ops_of(block):
        carried = [v for v in op.operands if v in an.carry]
        try:
            if op.name == "func.return":
                an.results = [_joined(an.carry.get(v), static_shape(v), an) for v in op.operands]
            elif op.name == "sft.view":
                if carried:
                    an.carry[op.results[0]] = _view_carry(op, an.carry[carried[0]], an)
            elif op.name in dialect.COMPUTE_OPS:
                _op_carry(op, an, memo)
            elif carried:
                raise _Refused(f"{op.name} reads the batch")
        except _Refused as why:
            at = where(op.location)
            raise _Refused(f"{why}{f' (at {at})' if at else ''}") from None


def _joined(carry: _Carry | None, shape, an: _Analysis) -> int | None:
    """The dim a result's parts join along (the batch its outermost factor), or None."""
    if carry is None:
        return None
    if shape[carry.dim] != an.batch * carry.inner:
        raise _Refused("a result holds the batch inside another dim")
    return carry.dim


def analyse(module, parts: int, args: tuple[int, ...]) -> _Analysis:
    """Which values carry the batch (dim 0 of the entry's arguments `args`) when the program
    runs in `parts` parts; IllegalPlan naming why not where it cannot."""
    funcs = functions(module)
    if len(funcs) != 1:
        raise IllegalPlan("sft-split-batch takes a module of one function")
    block = funcs[0].regions[0].blocks[0]
    try:
        if parts < 2 or not args or any(not 0 <= i < len(block.arguments) for i in args):
            raise _Refused(f"it takes two or more parts and the entry's batched arguments, not "
                           f"{parts} parts of arguments {list(args)}")
        shapes = [static_shape(block.arguments[i]) for i in args]
        batches = {s[0] if s else 0 for s in shapes}
        if len(batches) != 1 or min(batches) % parts or not min(batches):
            raise _Refused(f"the batched arguments' dim 0 ({sorted(batches)}) is not one batch "
                           f"that divides into {parts} parts")
        an = _Analysis(batches.pop())
        an.carry.update({block.arguments[i]: _Carry(0, 1) for i in args})
        _walk(block, an)
        for value, dim in [*((v, c.dim) for v, c in an.carry.items()), *an.halve.items()]:
            if static_shape(value)[dim] % parts:
                raise _Refused(f"a dim of {static_shape(value)[dim]} does not divide into {parts}")
        # every reader of the batch is an op the walk carried it through (or the return): an
        # op nested in another's region (sft.opaque's, capturing it) is not
        carriers = {operation(v.owner) for v in an.carry if not isinstance(v.owner, tm.Block)}
        for value in an.carry:
            for use in value.uses:
                reader = operation(use.owner)
                if reader.name != "func.return" and reader not in carriers:
                    raise _Refused(f"{reader.name} reads the batch (at {where(reader.location)})")
        # a divided constant must not also be read whole (nor returned)
        for value in an.halve:
            readers = [op for v, op in an.divided_reads if v == value]
            if any(all(operation(use.owner) != op for op in readers) for use in value.uses):
                raise _Refused("a constant is read both divided and whole")
    except _Refused as why:
        raise IllegalPlan(f"sft-split-batch cannot split this program's batch: {why}") from None
    return an


def _divided(ty, dim: int, parts: int):
    t = tm.RankedTensorType(ty)
    shape = list(t.shape)
    shape[dim] //= parts
    return tm.RankedTensorType.get(shape, t.element_type)


def split_batch(module, parts: int, args: tuple[int, ...]) -> list:
    """Rewrite `module` into the program of one of `parts` parts; returns `_Analysis.results`."""
    with module.context, tm.Location.unknown():
        an = analyse(module, parts, args)
        for value, dim in [*((v, c.dim) for v, c in an.carry.items()), *an.halve.items()]:
            value.set_type(_divided(value.type, dim, parts))
            splat = _splat(operation(value.owner))
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
        func = functions(module)[0]
        block = func.regions[0].blocks[0]
        returned = [v.type for v in ops_of(block)[-1].operands]
        func.attributes["function_type"] = tm.TypeAttr.get(
            tm.FunctionType.get([a.type for a in block.arguments], returned))
    return an.results


def result_dims(module, split: tuple[int, ...]) -> list:
    """Per entry result of `module` split as `split` (parts, arguments...), the dim its parts'
    results join along (None: the same in every part)."""
    with module.context:
        return analyse(module, split[0], tuple(split[1:])).results


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
