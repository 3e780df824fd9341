"""sft-raise: linalg-on-tensors (as torch-mlir or IREE's input conversion give it) -> sft.

Named linalg ops are first generalized, so one matcher sees every structured op as a generic:
all-parallel generics become `sft.map` (or `sft.view` when they only copy), generics with
reduction loops become `sft.contract` (a sum of products) or `sft.reduce`. Reshapes, slices and
pads become `sft.view`. A tensor op that fits none of these is wrapped in `sft.opaque`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..ir import run_pipeline, tm
from . import indexing as ix
from .common import (element_type, functions, has_uses, map_list, maps_attr, move_body, ops_of,
                     replace_op, static_shape, tensor_type)

# arith combiner -> reduce kind
COMBINERS = {
    "arith.addf": "add", "arith.addi": "add", "arith.mulf": "mul", "arith.muli": "mul",
    "arith.maximumf": "max", "arith.maxsi": "max", "arith.minimumf": "min", "arith.minsi": "min",
    "arith.maxnumf": "maxnum", "arith.minnumf": "minnum", "arith.andi": "and", "arith.ori": "or",
}
# ops that are not computation: left where they are
PASSIVE = {"arith.constant", "tensor.empty", "func.return"}


def _create(name, like, inputs, attributes, result_types, regions=0, init=None):
    return dialect.create(name, inputs, attributes, result_types, init=init, regions=regions,
                          loc=like.location, ip=tm.InsertionPoint(like))


def _gpu_yield(block, values):
    with tm.InsertionPoint(block), tm.Location.unknown():
        tm.Operation.create("gpu.yield", operands=list(values))


def _sft_index(dim):
    return tm.Operation.create("sft.index", results=[tm.IndexType.get()],
                               attributes={"dim": tm.IntegerAttr.get(tm.IntegerType.get_signless(64), dim)})


def wrap_opaque(op) -> None:
    """Carry `op` through unchanged inside an sft.opaque; an op with more results than the
    opaque's slots stays as it is (no sft pass reads it, and lowering leaves it there)."""
    if len(op.results) > dialect.RESULT_SLOTS:
        return
    opaque = _create("sft.opaque", op, [], {}, [r.type for r in op.results], regions=1)
    for old, new in zip(op.results, opaque.results):
        old.replace_all_uses_with(new)
    block = opaque.regions[0].blocks.append()
    op.detach_from_parent()
    tm.InsertionPoint(block).insert(op)
    _gpu_yield(block, op.results)


def _domain(maps, shapes) -> list[int] | None:
    extents: dict[int, int] = {}
    for m, shape in zip(maps, shapes):
        for expr, size in zip(m.results, shape):
            dim = ix.plain_dim(expr)
            if dim is not None:
                extents.setdefault(dim, size)
    n = maps[0].n_dims
    return [extents[i] for i in range(n)] if len(extents) == n else None


def _inverse_permutation(m):
    order = [ix.plain_dim(e) for e in m.results]
    if not order:  # a 0-d result (MLIR's get_permutation crashes on an empty list)
        return tm.AffineMap.get_empty()
    inverse = [order.index(i) for i in range(len(order))]
    return tm.AffineMap.get_permutation(inverse)


def _drop_unused_results(op):
    """A generic whose extra results nobody reads (argmax's index beside softmax's max) is
    rebuilt with only the used one, so that it can be raised; returns the op to raise."""
    g = op.opview
    used = [i for i, r in enumerate(op.results) if has_uses(r)]
    if len(op.results) == 1 or len(used) != 1:
        return op
    keep = used[0]
    block = g.regions[0].blocks[0]
    n_in = len(g.inputs)
    out_args = list(block.arguments)[n_in:]
    yield_op = ops_of(block)[-1]
    value = yield_op.operands[keep]
    if any(_depends_on(value, a) for i, a in enumerate(out_args) if i != keep):
        return op
    maps = map_list(g.indexing_maps)
    new = tm.Operation.create(
        "linalg.generic", results=[op.results[keep].type],
        operands=list(g.inputs) + [g.outputs[keep]],
        attributes={"indexing_maps": maps_attr(maps[:n_in] + [maps[n_in + keep]]),
                    "iterator_types": g.iterator_types,
                    "operandSegmentSizes": tm.DenseI32ArrayAttr.get([n_in, 1])},
        regions=1, loc=op.location, ip=tm.InsertionPoint(op))
    arg_types = [a.type for a in list(block.arguments)[:n_in]] + [out_args[keep].type]
    new_block = new.regions[0].blocks.append(*arg_types)
    args = list(block.arguments)
    arg_map = dict(zip(args[:n_in] + [out_args[keep]], new_block.arguments))
    needed = _slice(value, block)
    value = arg_map.get(value, value)
    move_body(block, new_block, arg_map, skip=[o for o in ops_of(block) if o not in needed])
    with tm.InsertionPoint(new_block):
        tm.Operation.create("linalg.yield", operands=[value])
    op.results[keep].replace_all_uses_with(new.results[0])
    op.erase()
    return new


def _index_expr(value):
    """`value`, an index computed in a generic's body from its loop positions (`linalg.index`),
    constants, additions and products by constants, as an affine expression of the loops;
    None for anything else."""
    owner = value.owner
    if not isinstance(owner, tm.OpView):
        return None
    op = owner.operation
    if op.name == "linalg.index":
        return ix.d(tm.IntegerAttr(op.attributes["dim"]).value)
    if op.name == "arith.constant" and isinstance(op.attributes["value"], tm.IntegerAttr):
        return ix.c(tm.IntegerAttr(op.attributes["value"]).value)
    if op.name in ("arith.addi", "arith.muli"):
        lhs, rhs = (_index_expr(v) for v in op.operands)
        if lhs is None or rhs is None:
            return None
        expr = lhs + rhs if op.name == "arith.addi" else lhs * rhs
        return expr if ix.linear_form(expr) is not None else None
    return None


def _extracts_as_inputs(op):
    """A generic whose body reads a tensor from above at positions that are affine in its loops
    (`tensor.extract %t[%i * 2 + %k, ..]`, torch-mlir's max pooling indices) is rebuilt with
    that tensor as one more input read through that map: IREE vectorises an input, not a
    gather (and sft can then state the generic). Returns the op to raise."""
    g = op.opview
    block = g.regions[0].blocks[0]
    found = []  # (extract op, tensor, map)
    maps = map_list(g.indexing_maps)
    domain = _domain(maps, [static_shape(v) or [] for v in list(g.inputs) + list(g.outputs)])
    for inner in ops_of(block):
        source = inner.operands[0] if inner.name == "tensor.extract" else None
        if source is None or _slice(source, block) or static_shape(source) is None or domain is None:
            continue  # (a tensor computed in the body is not one from above)
        exprs = [_index_expr(v) for v in list(inner.operands)[1:]]
        # linalg reads a loop's extent off any operand indexed by that loop alone: a tensor
        # read at x[i, i] from a larger one (a diagonal) stays a gather
        if any(e is None or (ix.plain_dim(e) is not None and domain[ix.plain_dim(e)] != size)
               for e, size in zip(exprs, static_shape(source))):
            continue
        found.append((inner, source, ix.affine_map(len(domain), exprs)))
    if not found:
        return op
    inputs, outputs = list(g.inputs), list(g.outputs)
    n_in = len(inputs)
    new = tm.Operation.create(
        "linalg.generic", results=[r.type for r in op.results],
        operands=inputs + [t for _, t, _ in found] + outputs,
        attributes={"indexing_maps": maps_attr(maps[:n_in] + [m for _, _, m in found] + maps[n_in:]),
                    "iterator_types": g.iterator_types,
                    "operandSegmentSizes": tm.DenseI32ArrayAttr.get([n_in + len(found), len(outputs)])},
        regions=1, loc=op.location, ip=tm.InsertionPoint(op))
    args = list(block.arguments)
    new_block = new.regions[0].blocks.append(
        *[a.type for a in args[:n_in]], *[element_type(t) for _, t, _ in found],
        *[a.type for a in args[n_in:]])
    new_args = list(new_block.arguments)
    arg_map = dict(zip(args[:n_in], new_args[:n_in]))
    arg_map.update(zip(args[n_in:], new_args[n_in + len(found):]))
    arg_map.update((inner.results[0], new_args[n_in + i]) for i, (inner, _, _) in enumerate(found))
    move_body(block, new_block, arg_map, skip=[inner for inner, _, _ in found])
    for old, value in zip(op.results, new.results):
        old.replace_all_uses_with(value)
    op.erase()
    return new


def _slice(value, block) -> list:
    """The ops of `block` that `value` is computed from."""
    found = []
    stack = [value]
    while stack:
        owner = stack.pop().owner
        if isinstance(owner, tm.OpView) and owner.operation.parent == block.owner and owner.operation not in found:
            found.append(owner.operation)
            stack.extend(owner.operation.operands)
    return found


def _depends_on(value, arg) -> bool:
    if value == arg:
        return True
    owner = value.owner
    return hasattr(owner, "operands") and any(_depends_on(v, arg) for v in owner.operands)


def _analyse_generic(op):
    """What sft op a generic is, as (kind, details), or None when it fits none; no mutation."""
    g = op.opview
    inputs, outputs = list(g.inputs), list(g.outputs)
    if len(outputs) != 1 or static_shape(outputs[0]) is None:
        return None
    maps = map_list(g.indexing_maps)
    parallel = [str(t).endswith("parallel>") for t in tm.ArrayAttr(g.iterator_types)]
    block = g.regions[0].blocks[0]
    args = list(block.arguments)
    # Scalar inputs are read from above; unread inputs only carried shapes (the domain is explicit).
    scalars = {args[i]: v for i, v in enumerate(inputs) if tensor_type(v) is None}
    keep = [i for i, v in enumerate(inputs) if tensor_type(v) is not None and has_uses(args[i])]
    ins = [(inputs[i], maps[i], args[i]) for i in keep]
    out, out_map, out_arg = outputs[0], maps[-1], args[len(inputs)]
    body = ops_of(block)
    yielded = body[-1].operands[0]
    if all(parallel):
        if not out_map.is_permutation:
            return None
        if has_uses(out_arg):  # the body reads the output's old value: it is one more input
            ins.append((out, out_map, out_arg))
        inverse = _inverse_permutation(out_map)
        ins = [(v, ix.affine_map(out_map.n_dims, [e.compose(inverse) for e in m.results]), a)
               for v, m, a in ins]
        if len(ins) == 1 and len(body) == 1 and yielded == ins[0][2]:
            return "view", dict(ins=ins)
        return "map", dict(ins=ins, scalars=scalars, value=yielded, skip=[body[-1]])
    combiner = yielded.owner
    if not isinstance(combiner, tm.OpView):
        return None
    combiner = combiner.operation
    others = [v for v in combiner.operands if v != out_arg]
    if (combiner.name not in COMBINERS or len(others) != 1 or len(combiner.operands) != 2
            or sum(1 for _ in out_arg.uses) != 1):
        return None
    value = others[0]
    domain = _domain(maps, [static_shape(v) or [] for v in inputs + outputs])
    if domain is None:
        return None
    kind = COMBINERS[combiner.name]
    details = dict(ins=ins, out=out, out_map=out_map, domain=domain, scalars=scalars, value=value,
                   skip=[body[-1], combiner], kind=kind)
    product = value.owner
    in_args = [a for _, _, a in ins]
    if (kind == "add" and len(ins) == 2 and isinstance(product, tm.OpView)
            and product.operation.name in ("arith.mulf", "arith.muli")):
        factors = [_widened_arg(v, in_args) for v in product.operands]
        extends = sum(v not in in_args for v in product.operands)  # the extf ops in the body
        if (sorted(in_args.index(a) for a in factors if a is not None) == [0, 1]
                and len(body) == 3 + extends):
            return "contract", details
    return "reduce", details


def _widened_arg(value, args):
    """The block argument `value` is, or extends (`arith.extf` of one, read nowhere else:
    a bf16/f16 x bf16/f16 product accumulated in f32, as sft-lower writes it); else None."""
    if value in args:
        return value
    owner = value.owner
    if (isinstance(owner, tm.OpView) and owner.operation.name == "arith.extf"
            and owner.operands[0] in args and sum(1 for _ in owner.operands[0].uses) == 1):
        return owner.operands[0]
    return None


def _raise_generic(op):
    """Replace a generic by its sft op; returns None when done, else the op to wrap opaque."""
    op = _drop_unused_results(_extracts_as_inputs(op))
    analysis = _analyse_generic(op)
    if analysis is None:
        return op
    kind, info = analysis
    in_vals = [v for v, _, _ in info["ins"]]
    in_maps = [m for _, m, _ in info["ins"]]
    result_type = [op.results[0].type]
    if kind == "view":
        new = _create("sft.view", op, in_vals, {"map": tm.AffineMapAttr.get(in_maps[0])}, result_type)
        replace_op(op, new)
        return None
    if kind == "map":
        new = _create("sft.map", op, in_vals, {"maps": maps_attr(in_maps)}, result_type, 1)
    else:
        attrs = {"maps": maps_attr(in_maps + [info["out_map"]]),
                 "domain": tm.DenseI64ArrayAttr.get(info["domain"])}
        if kind == "contract":
            replace_op(op, _create("sft.contract", op, in_vals, attrs, result_type, init=info["out"]))
            return None
        attrs["kind"] = tm.StringAttr.get(info["kind"])
        new = _create("sft.reduce", op, in_vals, attrs, result_type, 1, init=info["out"])
    block = op.opview.regions[0].blocks[0]
    new_block = new.regions[0].blocks.append(*[element_type(v) for v in in_vals])
    arg_map = dict(info["scalars"])
    arg_map.update(zip([a for _, _, a in info["ins"]], new_block.arguments))
    value = arg_map.get(info["value"], info["value"])
    move_body(block, new_block, arg_map, skip=info["skip"], rename={"linalg.index": _sft_index})
    _gpu_yield(new_block, [value])
    replace_op(op, new)
    return None


def _raise_view(op) -> bool:
    source = op.operands[0]
    src_shape, dst_shape = static_shape(source), static_shape(op.results[0])
    if src_shape is None or dst_shape is None:
        return False
    padding = []
    if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        groups = [[tm.IntegerAttr(i).value for i in tm.ArrayAttr(g)]
                  for g in tm.ArrayAttr(op.attributes["reassociation"])]
        view_map = (ix.expand_map(dst_shape, groups) if op.name == "tensor.expand_shape"
                    else ix.collapse_map(src_shape, groups))
    elif op.name == "tensor.extract_slice":
        if len(op.operands) != 1:  # dynamic offsets, sizes or strides
            return False
        offsets, sizes, strides = (list(tm.DenseI64ArrayAttr(op.attributes[k]))
                                   for k in ("static_offsets", "static_sizes", "static_strides"))
        exprs, r = [], 0
        for off, size, stride in zip(offsets, sizes, strides):
            # A rank-reducing slice drops unit dims; which ones does not change the values.
            if r < len(dst_shape) and dst_shape[r] == size:
                exprs.append(ix.d(r) * ix.c(stride) + ix.c(off))
                r += 1
            else:
                exprs.append(ix.c(off))
        view_map = ix.affine_map(len(dst_shape), exprs)
    elif op.name == "tensor.pad":
        if len(op.operands) != 1:
            return False
        low = list(tm.DenseI64ArrayAttr(op.attributes["static_low"]))
        yield_op = ops_of(op.regions[0].blocks[0])[-1]
        value = yield_op.operands[0]
        if len(ops_of(op.regions[0].blocks[0])) != 1 or value in list(op.regions[0].blocks[0].arguments):
            return False
        view_map = ix.affine_map(len(dst_shape), [ix.d(i) - ix.c(lo) for i, lo in enumerate(low)])
        padding = [value]
    else:
        return False
    view = _create("sft.view", op, [source] + padding, {"map": tm.AffineMapAttr.get(view_map)},
                   [op.results[0].type])
    replace_op(op, view)
    return True


# torch-mlir writes tanh-GELU's sqrt(2/pi) = 0.7978845608... as 0.797724 (a 2e-4 relative error
# in every such GELU; IREE alone has it too). Where that constant meets GELU's 0.044715 in one
# function, it is the truncated sqrt(2/pi) and is restored.
_TRUNCATED_SQRT_2_OVER_PI, _SQRT_2_OVER_PI, _GELU_CUBIC = 0.797724, 0.7978845608028654, 0.044715


def _float_constants(block) -> list:
    return [op for op in ops_of(block) if op.name == "arith.constant"
            and isinstance(op.attributes["value"], tm.FloatAttr)]


def restore_gelu_constant(block) -> None:
    constants = _float_constants(block)
    values = [tm.FloatAttr(op.attributes["value"]).value for op in constants]
    if not any(abs(v - _GELU_CUBIC) < 1e-8 for v in values):  # as f32 or f64
        return
    for op, value in zip(constants, values):
        if abs(value - _TRUNCATED_SQRT_2_OVER_PI) < 1e-7:
            ty = tm.FloatAttr(op.attributes["value"]).type
            op.attributes["value"] = tm.FloatAttr.get(ty, _SQRT_2_OVER_PI)


def raise_block(block) -> None:
    for op in ops_of(block):
        if (op.name in PASSIVE or op.name.startswith("sft.")
                or not any(tensor_type(r) is not None for r in op.results)):
            continue
        if op.name == "linalg.generic":
            leftover = _raise_generic(op)
        elif op.name.startswith("tensor.") and op.name != "tensor.extract" and _raise_view(op):
            leftover = None
        else:
            leftover = op
        if leftover is not None:
            wrap_opaque(leftover)


@dataclass(frozen=True)
class RaisePass:
    """linalg -> sft. Generalizes named ops, then states each as an sft op (see module doc)."""

    name = "sft-raise"

    def __call__(self, module) -> None:
        run_pipeline(module, "canonicalize,func.func(linalg-generalize-named-ops)")
        with module.context, tm.Location.unknown():
            for func in functions(module):
                restore_gelu_constant(func.regions[0].blocks[0])
                raise_block(func.regions[0].blocks[0])
        run_pipeline(module, "canonicalize")
