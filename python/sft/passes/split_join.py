"""The join function of a batch split whose program sums over its batch (`split_batch.py`).

A training step sums over its batch: the loss, each weight's gradient (a contraction over the
batch), each bias's (a reduction). Each part of the batch can sum its own rows, and the parts'
partial sums add up to the whole's, where the sums start from zero. What the program computes
from those sums (the loss's scale, the optimizer's update, the new state) is then computed once,
after the parts, by a second function of the module: the join. It is the whole function with
each sum replaced by the sum of its parts' partials (new arguments, every part's in turn), and
what only the batch needs dropped; the part function keeps the rest and returns its sums.
"""

from __future__ import annotations

from math import prod

from .. import dialect
from ..ir import tm
from . import indexing as ix
from .common import element_type, maps_attr, nested_reads, operation, ops_of, static_shape


def join_name(func, group: int) -> str:
    """The name of the join function of `group`: the entry's, `_join<group>` appended."""
    return f"{tm.StringAttr(func.attributes['sym_name']).value}_join{group}"


def join_groups(result_types: list, parts: int) -> tuple[tuple[int, ...], ...]:
    """The join's results (their types) in at most `parts` groups of about equal bytes, each
    computed by a join function of its own, side by side: the optimizer's update is as much
    memory traffic as the step's arithmetic, and one core alone took 470 us of a 1.2 ms step."""
    groups = [[] for _ in range(parts)]
    size = lambda ty: prod(tm.RankedTensorType(ty).shape) * 4  # noqa: E731 (the order is what counts)
    for i in sorted(range(len(result_types)), key=lambda i: -size(result_types[i])):
        min(groups, key=lambda g: sum(size(result_types[j]) for j in g)).append(i)
    return tuple(tuple(sorted(g)) for g in groups if g)


def clone_function(func, name: str):
    """A copy of `func` named `name`, right after it in its module."""
    copy = func.clone(ip=tm.InsertionPoint.after(func))
    copy.attributes["sym_name"] = tm.StringAttr.get(name)
    return copy


def set_results(func, values: list) -> None:
    """`func` returns `values`: its return replaced, what nothing reads any longer dropped,
    its type set to its arguments' and results' types."""
    block = func.regions[0].blocks[0]
    old = ops_of(block)[-1]
    tm.Operation.create("func.return", operands=values, ip=tm.InsertionPoint(old))
    old.erase()
    for op in reversed(ops_of(block)[:-1]):  # uses come after definitions: one pass back
        if all(next(iter(r.uses), None) is None for r in op.results):
            op.erase()
    func.attributes["function_type"] = tm.TypeAttr.get(tm.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in values]))


def _sum_of(values: list, ip):
    """An sft.map adding `values` (tensors of one type) element by element."""
    rank = len(static_shape(values[0]))
    identity = ix.affine_map(rank, [ix.d(i) for i in range(rank)])
    element = element_type(values[0])
    add = "arith.addf" if isinstance(element, tm.FloatType) else "arith.addi"
    op = dialect.create("sft.map", values, {"maps": maps_attr([identity] * len(values))},
                        [values[0].type], regions=1, ip=ip)
    block = op.regions[0].blocks.append(*[element] * len(values))
    with tm.InsertionPoint(block):
        total = block.arguments[0]
        for term in list(block.arguments)[1:]:
            total = tm.Operation.create(add, results=[element], operands=[total, term]).result
        tm.Operation.create("gpu.yield", operands=[total])
    return op.results[0]


def join_arguments(func, an) -> tuple[int, ...]:
    """The positions of `func`'s arguments that its join functions read (`an`: its analysis):
    those the results that do not carry the batch are computed from, short of the sums
    (a weight split's join reads the bias after the sum, not the input before it)."""
    block = func.regions[0].blocks[0]
    returned = ops_of(block)[-1].operands
    todo = [v for v, dim in zip(returned, an.results) if dim is None]
    seen, found = set(), set()
    while todo:
        value = todo.pop()
        if value in seen or value in an.sums:
            continue
        seen.add(value)
        if isinstance(value.owner, tm.Block):
            if value.owner == block:
                found.add(tm.BlockArgument(value).arg_number)
            continue
        todo += [*operation(value.owner).operands, *nested_reads(operation(value.owner))]
    return tuple(sorted(found))


def join_functions(func, an, parts: int) -> None:
    """Rewrite `func` (a copy of the whole function; `an` its `split_batch` analysis) into the
    joins: each sum over the batch read from `parts` new arguments added together, the
    arguments it does not read (`join_arguments`) dropped, each function returning one of
    `join_groups` of the results that do not carry the batch."""
    block = func.regions[0].blocks[0]
    read = join_arguments(func, an)
    unread = [i for i in range(len(block.arguments)) if i not in read]
    for total in an.sums:
        owner = total.owner.operation
        partials = [block.add_argument(total.type, owner.location) for _ in range(parts)]
        ops = ops_of(block)
        after = ops[ops.index(owner) + 1]
        with owner.location:
            total.replace_all_uses_with(_sum_of(partials, tm.InsertionPoint(after)))
    set_results(func, [v for v, dim in zip(ops_of(block)[-1].operands, an.results) if dim is None])
    for i in reversed(unread):
        block.erase_argument(i)
    whole = list(ops_of(block)[-1].operands)
    groups = join_groups([v.type for v in whole], parts)
    base = tm.StringAttr(func.attributes["sym_name"]).value.removesuffix("0")
    for k, group in reversed(list(enumerate(groups))):  # (each clone goes right after `func`)
        mine = func if k == 0 else clone_function(func, f"{base}{k}")
        set_results(mine, [list(ops_of(mine.regions[0].blocks[0])[-1].operands)[i] for i in group])
