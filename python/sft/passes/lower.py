"""sft-lower: sft -> linalg-on-tensors, the form IREE takes as input.

Each sft op becomes the linalg it stands for: a contraction that matches a named op (matmul,
batch_matmul, conv_2d_nchw_fchw, conv_2d_nhwc_hwcf) becomes that named op, and so does a max pooling
(pooling_nhwc_max, pooling_nchw_max), since IREE picks its strategies by them;
other maps, reductions and contractions become linalg.generic; views become transpose, broadcast,
expand/collapse_shape, extract_slice or pad. Raising and then lowering gives back the program
IREE would have compiled from the original. Every lowered op keeps an `sft.op` attribute with its
position among the sft ops, so that a plan can find its kernels afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dialect
from ..errors import SftError
from ..ir import linalg, tensor, tm, where
from . import indexing as ix
from .common import element_type, functions, map_list, maps_attr, move_body, ops_of, replace_op, static_shape

OP_ID = "sft.op"
INT_COMBINERS = {"add": "arith.addi", "mul": "arith.muli", "max": "arith.maxsi", "min": "arith.minsi",
                 "and": "arith.andi", "or": "arith.ori"}
FLOAT_COMBINERS = {"add": "arith.addf", "mul": "arith.mulf", "max": "arith.maximumf",
                   "min": "arith.minimumf", "maxnum": "arith.maxnumf", "minnum": "arith.minnumf"}


def _iterators(domain_rank: int, out_map) -> "tm.ArrayAttr":
    parallel = {ix.plain_dim(e) for e in out_map.results}
    return tm.ArrayAttr.get([tm.Attribute.parse(
        f"#linalg.iterator_type<{'parallel' if i in parallel else 'reduction'}>")
        for i in range(domain_rank)])


def _empty(result_type):
    ty = tm.RankedTensorType(result_type)
    return tensor.EmptyOp(list(ty.shape), ty.element_type).result


def _linalg_index(dim):
    return linalg.IndexOp(dim)


def _combine(kind: str, ty, lhs, rhs):
    table = FLOAT_COMBINERS if isinstance(ty, tm.FloatType) else INT_COMBINERS
    if kind not in table:
        raise SftError(f"reduction kind '{kind}' is not defined for {ty}")
    return tm.Operation.create(table[kind], results=[ty], operands=[lhs, rhs]).results[0]


def _generic(op, ins, maps, out, out_map, domain, body_block, combine=None):
    """linalg.generic over `domain`; the body is `body_block`'s ops, then `combine(value, acc)`."""
    # linalg infers loop bounds from operand shapes: a loop that no operand indexes plainly (a
    # pooling window) gets a shape-only tensor.empty operand, as linalg's own pooling ops do.
    seen = {ix.plain_dim(e) for m in maps + [out_map] for e in m.results}
    hidden = [i for i in range(len(domain)) if i not in seen]
    extra = []
    if hidden:
        extra = [tensor.EmptyOp([domain[i] for i in hidden], element_type(out)).result]
        maps = maps + [ix.affine_map(len(domain), [ix.d(i) for i in hidden])]
    result_type = out.type
    generic = linalg.GenericOp([result_type], list(ins) + extra, [out], maps_attr(maps + [out_map]),
                               _iterators(len(domain), out_map))
    arg_types = [element_type(v) for v in list(ins) + extra + [out]]
    block = generic.regions[0].blocks.append(*arg_types)
    args = list(block.arguments)
    if body_block is None:  # a contraction
        with tm.InsertionPoint(block):
            ty = element_type(out)
            mul = "arith.mulf" if isinstance(ty, tm.FloatType) else "arith.muli"
            # Inputs narrower than the result (bf16 or f16 into f32: sft-low-precision) are
            # extended first, so that products and sums are in the result's type.
            factors = [a if a.type == ty else
                       tm.Operation.create("arith.extf", results=[ty], operands=[a]).results[0]
                       for a in args[:2]]
            prod = tm.Operation.create(mul, results=[ty], operands=factors).results[0]
            linalg.YieldOp([_combine("add", ty, prod, args[-1])])
        return generic
    terminator = ops_of(body_block)[-1]
    value = terminator.operands[0]
    arg_map = dict(zip(body_block.arguments, args))
    value = arg_map.get(value, value)
    move_body(body_block, block, arg_map, skip=[terminator], rename={"sft.index": _linalg_index})
    with tm.InsertionPoint(block):
        if combine is not None:
            value = _combine(combine, element_type(out), value, args[-1])
        linalg.YieldOp([value])
    return generic


# Named convolutions: (filter map, result map, the input map's plain positions -> domain dim,
# its windowed positions -> (output dim, kernel dim), the op). IREE's CPU codegen keeps its
# convolution strategy for the named op only: the JAX CNN's forward convs ran 25-37x slower as
# generics.
_D7 = "(d0, d1, d2, d3, d4, d5, d6) -> "
_CONVS = (
    (_D7 + "(d1, d4, d5, d6)", _D7 + "(d0, d1, d2, d3)", {0: 0, 1: 4}, {2: (2, 5), 3: (3, 6)},
     linalg.conv_2d_nchw_fchw),
    (_D7 + "(d4, d5, d6, d3)", _D7 + "(d0, d1, d2, d3)", {0: 0, 3: 6}, {1: (1, 4), 2: (2, 5)},
     linalg.conv_2d_nhwc_hwcf),
)


def _window(input_map, plain: dict, windowed: dict) -> tuple[list[int], list[int]] | None:
    """(strides, dilations) when the input map of a convolution or pooling reads plain dims at
    `plain` (position -> domain dim) and windows at `windowed` (position -> (output dim,
    kernel dim)), as `out * stride + kernel * dilation`; else None."""
    forms = [ix.linear_form(e) for e in input_map.results]
    if len(forms) != len(plain) + len(windowed) or None in forms:
        return None
    if any(forms[pos] != ({dim: 1}, 0) for pos, dim in plain.items()):
        return None
    strides, dilations = [], []
    for pos, (out_dim, kernel_dim) in windowed.items():
        coeffs, const = forms[pos]
        if const or set(coeffs) != {out_dim, kernel_dim}:
            return None
        strides.append(coeffs[out_dim])
        dilations.append(coeffs[kernel_dim])
    return strides, dilations


def _named_conv(lhs, rhs, init, maps):
    """The named linalg convolution a 7-loop contraction is, or None."""
    text = [str(m) for m in maps]
    for filter_map, result_map, plain, windowed, build in _CONVS:
        found = _window(maps[0], plain, windowed) if text[1:] == [filter_map, result_map] else None
        if found is not None:
            return build(lhs, rhs, outs=[init], strides=found[0], dilations=found[1])
    return None


# Named max poolings: (the input map's plain positions -> domain dim, its windowed positions ->
# (output dim, kernel dim), the op); the result is the domain's first four loops. As a generic,
# the JAX CNN's 2x2 max pool ran 15x slower (95 against 6.4 us).
_POOLS = (
    ({0: 0, 3: 3}, {1: (1, 4), 2: (2, 5)}, linalg.pooling_nhwc_max),
    ({0: 0, 1: 1}, {2: (2, 4), 3: (3, 5)}, linalg.pooling_nchw_max),
)


def _named_pool(op, ins, init, maps, domain):
    """The named linalg max pooling an sft.reduce is (kind max of its one input, as it is, over
    two window loops), or None."""
    body = ops_of(op.regions[0].blocks[0])
    if (tm.StringAttr(op.attributes["kind"]).value != "max" or len(domain) != 6 or len(ins) != 1
            or len(body) != 1 or body[0].operands[0] != op.regions[0].blocks[0].arguments[0]
            or str(maps[1]) != "(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)"):
        return None
    for plain, windowed, build in _POOLS:
        found = _window(maps[0], plain, windowed)
        if found is not None:
            window = tensor.EmptyOp([domain[4], domain[5]], element_type(init)).result
            return build(ins[0], window, outs=[init], strides=found[0], dilations=found[1])
    return None


def _named_contraction(lhs, rhs, init, maps, domain):
    """The named linalg op a contraction is, or None."""
    text = [str(m) for m in maps]
    if text == ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]:
        return linalg.matmul(lhs, rhs, outs=[init])
    if text == ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
                "(d0, d1, d2, d3) -> (d0, d1, d2)"]:
        return linalg.batch_matmul(lhs, rhs, outs=[init])
    if len(domain) == 7:
        return _named_conv(lhs, rhs, init, maps)
    return None


def _lower_view(op):
    source, pad = dialect.inputs(op)[0], dialect.padding(op)
    view_map = tm.AffineMapAttr(op.attributes["map"]).value
    src, dst = static_shape(source), static_shape(op.results[0])
    result_type = op.results[0].type
    if pad is not None:
        forms = [ix.linear_form(e) for e in view_map.results]
        if len(src) != len(dst) or any(f is None or f[0] != {i: 1} for i, f in enumerate(forms)):
            raise SftError("a padded view must shift each dim: (d0, ..) -> (d0 - low0, ..)", where(op.location))
        low = [-f[1] for f in forms]
        high = [dst[i] - src[i] - low[i] for i in range(len(src))]
        pad_op = tensor.PadOp(result_type, source, [], [], low, high)
        block = pad_op.regions[0].blocks.append(*[tm.IndexType.get()] * len(src))
        with tm.InsertionPoint(block):
            tensor.YieldOp(pad)
        return pad_op
    reshape = ix.reshape_groups(view_map, src, dst)
    if reshape is not None:
        kind, groups = reshape
        reassociation = tm.ArrayAttr.get([tm.ArrayAttr.get(
            [tm.IntegerAttr.get(tm.IntegerType.get_signless(64), i) for i in g]) for g in groups])
        if kind == "expand":
            return tensor.ExpandShapeOp(result_type, source, reassociation, [], dst)
        return tensor.CollapseShapeOp(result_type, source, reassociation)
    dims = [ix.plain_dim(e) for e in view_map.results]
    if (None not in dims and len(set(dims)) == len(dims)
            and all(src[j] == dst[dim] for j, dim in enumerate(dims))):
        init = _empty(result_type)
        if len(dims) == len(dst):  # a permutation
            return linalg.transpose(source, outs=[init], permutation=[dims.index(i) for i in range(len(dst))])
        if dims == sorted(dims):
            return linalg.broadcast(source, outs=[init], dimensions=[i for i in range(len(dst)) if i not in dims])
    return (_slice(source, view_map, dst, result_type)
            or _broadcast_through_constants(source, view_map, src, dst, result_type)
            or _gather(source, view_map, result_type))


def _broadcast_through_constants(source, view_map, src, dst, result_type):
    """A broadcast that reads some source dims at a constant index (JAX's keepdims mean:
    (d0, d1, d2) -> (d0, d1, 0)) as a rank-reducing slice of those dims, then a broadcast: the
    form IREE fuses right (a generic reading through a constant index was miscompiled when its
    source was also a result), transposing what is left in a generic with plain maps; None
    when `view_map` is no such view."""
    exprs = list(view_map.results)
    constant = [isinstance(e, tm.AffineConstantExpr) for e in exprs]
    kept = [ix.plain_dim(e) for e, c in zip(exprs, constant) if not c]
    if (not any(constant) or None in kept or len(set(kept)) != len(kept)
            or [src[j] for j, c in enumerate(constant) if not c] != [dst[d] for d in kept]):
        return None
    offsets = [tm.AffineConstantExpr(e).value if c else 0 for e, c in zip(exprs, constant)]
    sizes = [1 if c else src[j] for j, c in enumerate(constant)]
    sliced_type = tm.RankedTensorType.get([dst[d] for d in kept], element_type(source))
    sliced = tensor.ExtractSliceOp(sliced_type, source, [], [], [], offsets, sizes, [1] * len(src))
    if kept == list(range(len(dst))):
        return sliced
    if kept == sorted(kept):
        return linalg.broadcast(sliced.result, outs=[_empty(result_type)],
                                dimensions=[i for i in range(len(dst)) if i not in kept])
    return _gather(sliced.result, ix.affine_map(len(dst), [ix.d(k) for k in kept]), result_type)


def _slice(source, view_map, dst, result_type):
    """A tensor.extract_slice when `view_map` is one (each result a strided dim, in order, or a
    constant for a dim the slice drops), else None."""
    offsets, sizes, strides, r = [], [], [], 0
    for expr in view_map.results:
        form = ix.linear_form(expr)
        if form is None or len(form[0]) > 1:
            return None
        if form[0]:
            (dim, stride), = form[0].items()
            if dim != r:
                return None
            offsets.append(form[1]), sizes.append(dst[r]), strides.append(stride)
            r += 1
        else:
            offsets.append(form[1]), sizes.append(1), strides.append(1)
    if r != len(dst):  # a result dim no source dim gives: a broadcast too, not a slice
        return None
    return tensor.ExtractSliceOp(result_type, source, [], [], [], offsets, sizes, strides)


def _gather(source, view_map, result_type):
    """Any other view as a linalg.generic that reads the source through `view_map` (a transpose
    that also broadcasts, a broadcast through a constant index like (d0, d1) -> (d0, 0))."""
    init = _empty(result_type)
    rank = len(static_shape(init))
    identity = tm.AffineMap.get_identity(rank)
    generic = linalg.GenericOp([result_type], [source], [init], maps_attr([view_map, identity]),
                               _iterators(rank, identity))
    block = generic.regions[0].blocks.append(element_type(source), element_type(init))
    with tm.InsertionPoint(block):
        linalg.YieldOp([block.arguments[0]])
    return generic


def lower_op(op):
    """Build the linalg for one sft op before it; returns the op whose results replace it."""
    if op.name == "sft.view":
        return _lower_view(op)
    if op.name == "sft.map":
        ins = dialect.inputs(op)
        body = op.regions[0].blocks[0]
        terminator = ops_of(body)[-1]
        if not ins and len(ops_of(body)) == 1 and terminator.operands[0].owner != body:
            return linalg.fill(terminator.operands[0], outs=[_empty(op.results[0].type)])
        out = _empty(op.results[0].type)
        rank = len(static_shape(op.results[0]))
        identity = tm.AffineMap.get_identity(rank)
        return _generic(op, ins, map_list(op.attributes["maps"]), out, identity, [0] * rank, body)
    maps = map_list(op.attributes["maps"])
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    ins, init = dialect.inputs(op), dialect.init(op)
    if op.name == "sft.contract":
        named = _named_contraction(*ins, init, maps, domain)
        if named is not None:
            return named
        return _generic(op, ins, maps[:-1], init, maps[-1], domain, None)
    named = _named_pool(op, ins, init, maps, domain)
    if named is not None:
        return named
    kind = tm.StringAttr(op.attributes["kind"]).value
    return _generic(op, ins, maps[:-1], init, maps[-1], domain, op.regions[0].blocks[0], combine=kind)


def lower_block(block, index: int = 0) -> int:
    """Lower a block's sft ops, stamping compute ops with `sft.op` ids from `index` on (ids
    run across functions, as `compute_ops` counts them); returns the next id."""
    for op in ops_of(block):
        if op.name == "sft.opaque":
            inner = op.regions[0].blocks[0]
            terminator = ops_of(inner)[-1]
            for inner_op in ops_of(inner)[:-1]:
                inner_op.move_before(op)
            for old, new in zip(op.results, terminator.operands):
                old.replace_all_uses_with(new)
            op.erase()
        elif op.name in dialect.COMPUTE_OPS:
            with tm.InsertionPoint(op), op.location:
                new = lower_op(op)
            new = new.owner if isinstance(new, tm.Value) else new.operation
            new.attributes[OP_ID] = tm.IntegerAttr.get(tm.IntegerType.get_signless(64), index)
            index += 1
            replace_op(op, new)
    return index


@dataclass(frozen=True)
class LowerPass:
    """sft -> linalg-on-tensors (see module doc)."""

    name = "sft-lower"

    def __call__(self, module) -> None:
        with module.context, tm.Location.unknown():
            index = 0
            for func in functions(module):
                index = lower_block(func.regions[0].blocks[0], index)
