"""Small IR utilities shared by the raise and lower passes."""

from __future__ import annotations

from ..errors import IllegalPlan
from ..ir import tm


def functions(module):
    return [op for op in module.body.operations if op.operation.name == "func.func"]


def ops_of(block):
    return [op.operation for op in block.operations]


def compute_ops(module) -> list:
    """The sft compute ops of the whole module, function after function, each in order. An
    op's position here is its id: the one plans, the search space, every pass that takes op ids,
    sft-lower's `sft.op` stamps and the reports use (a module with private functions
    included). Ops a pass inserts move the ids after them (see low_precision.renumber)."""
    from .. import dialect

    return [op for func in functions(module) for op in ops_of(func.regions[0].blocks[0])
            if op.name in dialect.COMPUTE_OPS]


def operation(owner):
    """The operation behind a value's or a use's `owner` (the bindings give an OpView or the
    Operation itself; a block argument's owner is its Block, returned as it is)."""
    return getattr(owner, "operation", owner)


def nested_reads(op):
    """The operands of the ops nested in `op`'s regions (values it captures among them)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in ops_of(block):
                yield from inner.operands
                yield from nested_reads(inner)


def view_permutation(view) -> list[int] | None:
    """The source position each result position of a transposing sft.view reads (not the
    identity), or None when `view` is anything else (a block argument's owner included)."""
    from .. import dialect
    from . import indexing as ix

    if getattr(view, "name", "") != "sft.view" or dialect.padding(view) is not None:
        return None
    view_map = tm.AffineMapAttr(view.attributes["map"]).value
    dims = ix.plain_dims(view_map)
    if dims is None or view_map.n_dims != len(dims) or sorted(dims) != list(range(len(dims))) \
            or dims == sorted(dims):
        return None
    return dims


def tensor_type(value):
    return tm.RankedTensorType(value.type) if isinstance(value.type, tm.RankedTensorType) else None


def static_shape(value) -> list[int] | None:
    ty = tensor_type(value)
    return list(ty.shape) if ty is not None and ty.has_static_shape else None


def element_type(value):
    ty = tensor_type(value)
    return ty.element_type if ty is not None else value.type


def element_bytes(value) -> int:
    """Bytes per element of a float tensor (4 for other element types)."""
    ty = element_type(value)
    return tm.FloatType(ty).width // 8 if isinstance(ty, tm.FloatType) else 4


def map_list(attr) -> list:
    return [tm.AffineMapAttr(a).value for a in tm.ArrayAttr(attr)]


def maps_attr(maps) -> "tm.ArrayAttr":
    return tm.ArrayAttr.get([tm.AffineMapAttr.get(m) for m in maps])


def create_view(source, view_map, shape: list[int], ip):
    """An sft.view of `source` through `view_map` (result index -> source index), of `shape`."""
    from .. import dialect

    result = tm.RankedTensorType.get(shape, element_type(source))
    return dialect.create("sft.view", [source], {"map": tm.AffineMapAttr.get(view_map)}, [result],
                          ip=ip).results[0]


def has_uses(value) -> bool:
    return any(True for _ in value.uses)


def move_body(old_block, new_block, arg_map: dict, skip=(), rename: dict | None = None) -> None:
    """Append the ops of `old_block` to `new_block`, re-pointing its arguments through `arg_map`.

    Ops in `skip` stay behind. `rename` swaps one dialect's loop-index op for the other's:
    {op name: factory(dim) -> new op}.
    """
    for old, new in arg_map.items():
        old.replace_all_uses_with(new)
    ip = tm.InsertionPoint(new_block)
    for op in ops_of(old_block):
        if any(op == s for s in skip):
            continue
        if rename and op.name in rename:
            with ip, op.location:
                new = rename[op.name](tm.IntegerAttr(op.attributes["dim"]).value)
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
            continue
        op.detach_from_parent()
        ip.insert(op)


def replace_op(old, new) -> None:
    for a, b in zip(old.results, new.results):
        a.replace_all_uses_with(b)
    old.erase()


def op_ids_option(pass_name: str, text: str, name: str = "ops") -> tuple[int, ...]:
    """The integers of a pass option `ops=ID,ID` (sft-opt -p 'PASS{ops=40,59}'; `name` for
    another key); IllegalPlan naming the pass for anything else."""
    key, _, value = text.partition("=")
    try:
        if key.strip() != name:
            raise ValueError
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise IllegalPlan(f"{pass_name} takes {name}=I,I,..., not '{text}'") from None


def items_option(pass_name: str, text: str, name: str, usage: str, item) -> tuple:
    """The items of a pass option `name=A:B,C:D` (sft-opt -p 'PASS{ops=2:bf16}'), each read by
    `item` from its colon-separated fields; IllegalPlan naming the pass and `usage` ("ID:TYPE")
    for anything else (a ValueError from `item` included)."""
    key, _, value = text.partition("=")
    try:
        if key.strip() != name:
            raise ValueError
        return tuple(item(*entry.strip().split(":")) for entry in value.split(",") if entry.strip())
    except (ValueError, TypeError):
        raise IllegalPlan(f"{pass_name} takes {name}={usage},..., not '{text}'") from None


def rewrite_ops(module, ops: tuple[int, ...], analyse, rewrite, refusal: str) -> None:
    """The body of a pass that rewrites the compute ops `ops` (by id): each analysed first
    (`analyse(op)`; None: IllegalPlan `refusal`, formatted with the op's id), ids read before
    any op moves, then `rewrite(op, analysis)` on each."""
    with module.context, tm.Location.unknown():
        compute = compute_ops(module)
        found = {}
        for op_id in ops:
            found[op_id] = analyse(compute[op_id]) if 0 <= op_id < len(compute) else None
            if found[op_id] is None:
                raise IllegalPlan(refusal.format(op_id))
        for op_id in ops:
            rewrite(compute[op_id], found[op_id])
