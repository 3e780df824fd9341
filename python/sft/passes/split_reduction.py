"""sft-split-reduction: a sum over a tensor's outer dims, its kept dims few and innermost, as two.

Batch norm on channels-last activations (JAX's NHWC) sums [n, h, w, c] over n, h and w for
each of c = 16 channels: the kept dims are the contiguous ones, and too few for a vector
register set. IREE's CPU code gives each workgroup 2 channels and walks 8192 rows with 2-wide
vectors (55 us a sum on one Zen 4 core; 109 us with a square fused in). Read as [rows / s,
s * c] the same memory is a sum over the outer dim of s * c contiguous columns, which
vectorises; a second, tiny sum folds the s partial rows. On the same core, both sums of a
[8, 32, 32, 16] batch norm took 168 us a call, split with s * c = 128 33 us (64: 46, 256: 35).

The rewrite: the input viewed flat and as [rows / s, s * kept] (a reshape: no copy), a sum of
its rows (the original body, from a zero of the result's type), that viewed as [s, kept], its
sum into the original init, viewed back to the result's shape. Every term is the original's;
their order differs (as reassociation's does). `ops` lists the reductions to rewrite, by op id;
`outer_sums` says which qualify.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, ints
from ..ir import tm
from . import indexing as ix
from .common import (compute_ops, create_view, element_bytes, element_type, map_list, maps_attr,
                     move_body, op_ids_option, ops_of, rewrite_ops, static_shape)

# The width of a split row, in bytes: 512 (128 f32, eight AVX-512 registers) measured best of
# 256-2048 on the batch norm above; a row of at least this much already vectorises.
ROW_BYTES = 512
MIN_ROWS = 64  # fewer rows than this: too little to matter


@dataclass(frozen=True)
class _Split:
    rows: int   # product of the summed dims
    kept: int   # product of the kept dims
    factor: int  # s: the rows folded into one split row


def _split(op) -> _Split | None:
    """How to split `op`: a float sum whose input is read as [summed dims..., kept dims...] in
    the result's order, the kept dims narrower than `ROW_BYTES`; None for anything else."""
    if op.name != "sft.reduce" or tm.StringAttr(op.attributes["kind"]).value != "add":
        return None
    operands = list(op.operands)
    if len(operands) != 2 or not isinstance(element_type(op.results[0]), tm.FloatType):
        return None
    body = op.regions[0].blocks[0]
    if any(o.name == "sft.index" for o in ops_of(body)):
        return None  # the body reads loop indices, which the split renumbers
    maps = map_list(op.attributes["maps"])
    read, kept = ix.plain_dims(maps[0]), ix.plain_dims(maps[1])
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    if (read is None or kept is None or not kept or sorted(read) != list(range(len(domain)))
            or static_shape(operands[0]) != [domain[d] for d in read]):
        return None  # each loop read once, the input as large as the loops it is read over
    summed = read[:len(read) - len(kept)]
    if read[len(summed):] != kept or not summed:
        return None
    rows, width = prod(domain[d] for d in summed), prod(domain[d] for d in kept)
    row_elements = ROW_BYTES // element_bytes(op.results[0])
    if width >= row_elements or rows < MIN_ROWS:
        return None
    factor = max((s for s in range(2, row_elements // width + 1) if rows % s == 0), default=0)
    # split rows narrower than half the width gain too little for the two ops they add
    if not factor or rows // factor < 2 or 2 * factor * width < row_elements:
        return None
    return _Split(rows, width, factor)


def _reshape(source, shape: list[int], ip):
    """`source` viewed flat, then as `shape` (row-major: no element moves)."""
    src = static_shape(source)
    if len(src) == 1:
        flat = source
    else:
        flat = create_view(source, ix.collapse_map(src, [list(range(len(src)))]), [prod(src)], ip)
    if len(shape) == 1:
        return flat
    return create_view(flat, ix.expand_map(shape, [list(range(len(shape)))]), shape, ip)


def _column_sum(source, init, ip):
    """An sft.reduce summing the rows of 2-D `source` into `init` (1-D), with an empty body
    block for the caller to fill (its argument: an element of `source`)."""
    rows, width = static_shape(source)
    attrs = {"domain": tm.DenseI64ArrayAttr.get([width, rows]), "kind": tm.StringAttr.get("add"),
             "maps": maps_attr([ix.affine_map(2, [ix.d(1), ix.d(0)]), ix.affine_map(2, [ix.d(0)])])}
    op = dialect.create("sft.reduce", [source], attrs, [init.type], init=init, regions=1, ip=ip)
    return op, op.regions[0].blocks.append(element_type(source))


def split(op, how: _Split) -> None:
    ip = tm.InsertionPoint(op)
    source, init = list(op.operands)
    element = element_type(op.results[0])
    s, width = how.factor, how.kept
    with op.location:
        value = {"value": tm.FloatAttr.get(element, 0.0)}
        zero = tm.Operation.create("arith.constant", results=[element], attributes=value,
                                   ip=ip).result
        partial_init = dialect.create_fill(zero, tm.RankedTensorType.get([s * width], element), ip)
        rows = _reshape(source, [how.rows // s, s * width], ip)
        partial, block = _column_sum(rows, partial_init, ip)
        old_block = op.regions[0].blocks[0]
        move_body(old_block, block, {old_block.arguments[0]: block.arguments[0]})
        folded = _reshape(partial.results[0], [s, width], ip)
        flat_init = _reshape(init, [width], ip)
        total, block = _column_sum(folded, flat_init, ip)
        with tm.InsertionPoint(block):
            tm.Operation.create("gpu.yield", operands=[block.arguments[0]])
        result = _reshape(total.results[0], static_shape(op.results[0]), ip)
    op.results[0].replace_all_uses_with(result)
    op.erase()


@dataclass(frozen=True)
class SplitReductionPass:
    """Sums over outer dims as a sum of split rows and a fold: {ops=ID,...}."""

    ops: tuple[int, ...] = ()
    name = "sft-split-reduction"

    @classmethod
    def from_options(cls, text: str) -> "SplitReductionPass":
        """`ops=ID,ID` (sft-opt -p 'sft-split-reduction{ops=1}')."""
        return cls(op_ids_option(cls.name, text))

    def __call__(self, module) -> None:
        rewrite_ops(module, self.ops, _split, split, "plan splits op {}, but it is not a float "
                    "sum over outer dims of a few innermost kept ones")


def outer_sums(module) -> tuple[int, ...]:
    """Op ids of the sums `sft-split-reduction` rewrites: their kept dims innermost and narrower
    than `ROW_BYTES`, over at least `MIN_ROWS` rows."""
    with module.context:
        return tuple(i for i, op in enumerate(compute_ops(module)) if _split(op) is not None)


KIND = DecisionKind(
    field="split", type="tuple[int, ...]", default=(),
    doc="sums over outer dims (op ids) computed as sums of split rows and a fold",
    parse=ints, stage=SFT, make_pass=SplitReductionPass,
    describe=lambda ops: f"split sums {list(ops)}")
