"""The proof behind sft-split-batch (`split_batch.py`): which values carry a program's batch.

The split is sound only where the program says so, and this pass proves it from the index
maps: a loop is the batch loop of an op where an input carrying the batch reads it, plainly,
at the carried dim; every other read of that loop must be of a value constant along the dim
it reads (a fill, a broadcast: `_uniform`), the body reads its index only as the row of a
batch it reads (a gather of each row's label: `_own_rows`), and the result carries the batch
where its map writes that loop. A view carries the batch through permutations, broadcasts and
reshapes that keep it the outermost factor of its dim; an op the pass does not know
(sft.opaque) must not read it. An op that sums its batch loop from zero (a contraction, an add
reduction: a training step's loss and gradients) gives each part its rows' partial sum, and
what is computed from those sums goes to the join functions (`split_join.py`), which must not
read the batch itself. Anything else (batch statistics applied back to the batch, a max over
it, a batch-sized parameter, a slice of the batch) refuses the split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from .. import dialect
from ..errors import IllegalPlan
from ..ir import tm, where
from . import indexing as ix
from .common import functions, map_list, nested_reads, operation, ops_of, static_shape


class _Refused(Exception):
    """Why the program cannot be split (the message); `uncut`: (value, dim) where the split
    would need that value cut along that dim too."""

    def __init__(self, message: str, uncut: tuple | None = None):
        super().__init__(message)
        self.uncut = uncut


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
    # results of sums over the batch loop (each part sums its own rows: `_sums_batch`), in order
    sums: list = field(default_factory=list)
    # values computed from those sums: the join function's (`split_join.py`)
    joined: set = field(default_factory=set)
    # tensor.extract ops nested in a carrier op that read its own rows of a batch (`_own_rows`)
    row_reads: set = field(default_factory=set)
    # divided fill -> (reader, operand position) of each read of it whole
    whole_reads: dict = field(default_factory=dict)


def splat_of(op):
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
    if dialect.fill_value(owner) is not None or splat_of(owner) is not None:
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


def _own_rows(op, loop: int, inner: int, an: _Analysis) -> set:
    """The tensor.extract ops in `op`'s body that read a value carrying the batch at the row of
    `op`'s batch loop (a cross-entropy's gather of each row's label: a part reads its own
    rows); _Refused where the body reads that loop's index for anything else."""
    found = set()
    for index in ops_of(op.regions[0].blocks[0]):
        if index.name != "sft.index" or tm.IntegerAttr(index.attributes["dim"]).value != loop:
            continue
        for use in index.results[0].uses:
            reader = operation(use.owner)
            source = reader.operands[0] if reader.name == "tensor.extract" else None
            carry = an.carry.get(source) if source is not None else None
            if carry is None or use.operand_number - 1 != carry.dim or carry.inner != inner:
                raise _Refused("an op's body reads the batch loop's index other than as the row "
                               "of a batch it reads")
            found.add(reader)
    return found


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
        an.row_reads |= _own_rows(op, loop, inner, an)
    for value, m in reads:
        positions = [p for p, e in enumerate(m.results) if loop in ix.dims_of(e)]
        if value in an.carry:
            if positions != [an.carry[value].dim]:
                raise _Refused("an op reads the batch loop at two dims of one input")
            continue
        for p in positions:
            if ix.plain_dim(m.results[p]) != loop or p not in _uniform(value, memo):
                raise _Refused("an op reads its batch loop from a value that is not split "
                               "(a batch-sized constant or parameter)", (value, p))
            if an.halve.setdefault(value, p) != p:
                raise _Refused("a value divided along two dims")
            an.divided_reads.append((value, op))
    written = [p for p, e in enumerate(out_map.results) if loop in ix.dims_of(e)]
    if not written and _sums_batch(op):  # each part sums its rows; the join adds the parts'
        an.sums.append(result)
        an.domains.append((op, loop))
        return
    if len(written) != 1 or ix.plain_dim(out_map.results[written[0]]) != loop:
        raise _Refused("an op reduces over the batch other than by a sum from zero (a max "
                       "across it, a sum onto a value)")
    an.carry[result] = _Carry(written[0], inner)
    if op.name != "sft.map":
        an.domains.append((op, loop))


def _fill_scalar(owner):
    """The scalar attribute a fill or a splat constant holds everywhere, or None."""
    splat = splat_of(owner)
    if splat is not None:
        return splat.get_splat_value()
    scalar = dialect.fill_value(owner)
    const = operation(scalar.owner) if scalar is not None else None
    return const.attributes["value"] if getattr(const, "name", "") == "arith.constant" else None


def _sums_batch(op) -> bool:
    """Whether `op`, not writing its batch loop, sums over it from zero: a contraction or an
    add reduction whose init is zeros (a part's partial sums then add up to the whole's)."""
    if op.name == "sft.reduce" and tm.StringAttr(op.attributes["kind"]).value != "add":
        return False
    zero = _fill_scalar(operation(dialect.init(op).owner))
    if zero is None:
        return False
    number = tm.FloatAttr if isinstance(tm.Attribute(zero).type, tm.FloatType) else tm.IntegerAttr
    return number(zero).value == 0


def _walk(block, an: _Analysis) -> None:
    memo: dict = {}
    for op in ops_of(block):
        carried = [v for v in op.operands if v in an.carry]
        reads = [*op.operands, *nested_reads(op)]
        try:
            if op.name != "func.return" and any(v in an.joined or v in an.sums for v in reads):
                if any(v in an.carry for v in reads):
                    raise _Refused("an op reads a sum over the batch and the batch itself (batch "
                                   "statistics applied to it: batch norm in train mode)")
                an.joined.update(op.results)
            elif op.name == "func.return":
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
            raise _Refused(f"{why}{f' (at {at})' if at else ''}", why.uncut) from None


def _joined(carry: _Carry | None, shape, an: _Analysis) -> int | None:
    """The dim a result's parts join along (the batch its outermost factor), or None."""
    if carry is None:
        return None
    if shape[carry.dim] != an.batch * carry.inner:
        raise _Refused("a result holds the batch inside another dim")
    return carry.dim


def analyse(module, parts: int, cuts: tuple[tuple[int, int], ...]) -> _Analysis:
    """Which values carry the batch (dim `dim` of the entry's argument `arg`, for each
    (arg, dim) of `cuts`) when the program runs in `parts` parts; IllegalPlan naming why not
    where it cannot."""
    funcs = functions(module)
    if len(funcs) != 1:
        raise IllegalPlan("sft-split-batch takes a module of one function")
    return analyse_function(funcs[0], parts, cuts)


def analyse_function(func, parts: int, cuts: tuple[tuple[int, int], ...]) -> _Analysis:
    block = func.regions[0].blocks[0]
    try:
        args = [a for a, _ in cuts]
        if parts < 2 or not cuts or any(not 0 <= i < len(block.arguments) for i in args) \
                or len(set(args)) != len(args):
            raise _Refused(f"it takes two or more parts and the entry's batched arguments, not "
                           f"{parts} parts of arguments {args}")
        shapes = [static_shape(block.arguments[a]) or [] for a in args]
        if any(not 0 <= d < len(s) for s, (_, d) in zip(shapes, cuts)):
            raise _Refused(f"an argument has no dim to cut at ({list(cuts)})")
        batches = {s[d] for s, (_, d) in zip(shapes, cuts)}
        if len(batches) != 1 or min(batches) % parts or not min(batches):
            dims = sorted({d for _, d in cuts})
            raise _Refused(f"the batched arguments' dim {', '.join(map(str, dims))} "
                           f"({sorted(batches)}) is not one batch that divides into {parts} parts")
        an = _Analysis(batches.pop())
        an.carry.update({block.arguments[a]: _Carry(d, 1) for a, d in cuts})
        _walk(block, an)
        for value, dim in [*((v, c.dim) for v, c in an.carry.items()), *an.halve.items()]:
            if static_shape(value)[dim] % parts:
                raise _Refused(f"a dim of {static_shape(value)[dim]} does not divide into {parts}")
        # every reader of the batch is an op the walk carried it through (or the return): an
        # op nested in another's region (sft.opaque's, capturing it) is not
        carriers = {operation(v.owner) for v in [*an.carry, *an.sums] if not isinstance(v.owner, tm.Block)}
        for value in an.carry:
            for use in value.uses:
                reader = operation(use.owner)
                if reader.name != "func.return" and reader not in carriers | an.row_reads:
                    raise _Refused(f"{reader.name} reads the batch (at {where(reader.location)})")
        # a divided value also read whole (nor returned) must be a fill or a splat: its whole
        # readers get a copy (one zero fill serves a [batch, n] init and a weight's gradient's)
        for value in an.halve:
            readers = [op for v, op in an.divided_reads if v == value]
            whole = [use for use in value.uses if operation(use.owner) not in readers]
            owner = operation(value.owner)
            if whole and (operation(whole[0].owner).name == "func.return"
                          or (dialect.fill_value(owner) is None and splat_of(owner) is None)):
                raise _Refused("a constant is read both divided and whole")
            if whole:
                an.whole_reads[value] = [(operation(u.owner), u.operand_number) for u in whole]
    except _Refused as why:
        refusal = IllegalPlan(f"sft-split-batch cannot split this program's batch: {why}")
        # the entry's (argument, dim) the split would need cut too, where that is why: a
        # search may grow its cut from it (`search.batch_split.weight_split_of`)
        refusal.uncut = _entry_dim(*why.uncut, block) if why.uncut else None
        raise refusal from None
    return an


def _entry_dim(value, dim: int, block) -> tuple[int, int] | None:
    """(argument, dim) of `block` that `value`'s dim `dim` reads through views that permute
    (a transpose), or None."""
    while not isinstance(value.owner, tm.Block):
        op = operation(value.owner)
        if op.name != "sft.view" or dialect.padding(op) is not None:
            return None
        exprs = list(tm.AffineMapAttr(op.attributes["map"]).value.results)
        source = [p for p, e in enumerate(exprs) if ix.plain_dim(e) == dim]
        if len(source) != 1 or len(exprs) != len(static_shape(op.results[0]) or []):
            return None
        value, dim = dialect.inputs(op)[0], source[0]
    return (tm.BlockArgument(value).arg_number, dim) if value.owner == block else None
