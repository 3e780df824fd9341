"""sft-im2col: a convolution whose window is larger than its output as a patch copy and a matmul.

A convolution's filter gradient is a convolution too, with the roles turned around: the
activation's patches slide under the output gradient as a "filter" as large as the output
(32x32), and the result is as small as the forward filter (3x3). IREE's CPU code for a
convolution vectorises along the output's width and channels, which such a shape does not
have: on a 2-core Zen 4, a CNN training step's two filter-gradient convolutions ran at 4.6 and
5.5 GFLOP/s, 2.3 of its 3.6 ms (`sft-bench dispatches cnn`), where IREE's matmuls run 50-65.
IREE's own im2col (`--iree-global-opt-use-im2col-for-convs`) takes the named convolutions
only, not the grouped one torch writes for a strided convolution's gradient. Framework
libraries compute filter gradients the same way (a GEMM over the activation's patches).

The rewrite: the operand read through windows (`x[.., oh * s + kh, ..]`) is copied once into a
patch tensor laid out [batch, summed loops, its own result loops], the other operand is read
(copied only when its loops are not already in the order [batch, its result loops, summed
loops]) as [batch, rows, summed], and the product is a plain (batch) matmul, whose result is
reshaped and transposed back to the original result. Every product and sum is the original's;
the sums' order may differ. `ops` lists the contractions to rewrite, by op id;
`window_larger_than_output` says which are such convolutions.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .. import dialect
from ..decisions.kind import SFT, DecisionKind, ints
from ..ir import tm
from . import indexing as ix
from .common import (compute_ops, create_view, element_type, has_uses, map_list, maps_attr,
                     op_ids_option, operation, rewrite_ops, static_shape)


@dataclass(frozen=True)
class _Shape:
    """A windowed contraction's loops by role: the windowed operand's position (0 or 1), and
    loop dims in the order the rewrite lays them out."""

    windowed: int
    batch: list[int]     # in the result and both operands
    own: list[int]       # in the result and the windowed operand only
    rows: list[int]      # in the result and the plain operand only
    summed: list[int]    # in both operands, not the result


def _shape(op) -> _Shape | None:
    """The loop roles of a contraction one operand of which is read through windows, with a
    fill as init; None for anything else."""
    if op.name != "sft.contract" or dialect.fill_value(operation(dialect.init(op).owner)) is None:
        return None
    maps = map_list(op.attributes["maps"])
    out, plain = ix.plain_dims(maps[2]), [ix.plain_dims(m) for m in maps[:2]]
    if out is None or plain.count(None) != 1:
        return None
    windowed = plain.index(None)
    forms = [ix.linear_form(e) for e in maps[windowed].results]
    if None in forms or any(const for _, const in forms):
        return None  # a padded read is a padded view before the contraction, not a constant here
    read = [set(coeffs) for coeffs, _ in forms]
    by_window = set().union(*read)
    by_plain = plain[1 - windowed]
    n = maps[2].n_dims
    if len(set(by_plain)) != len(by_plain) or set(range(n)) != by_window | set(by_plain) | set(out):
        return None
    batch = [d for d in by_plain if d in out and d in by_window]
    rows = [d for d in by_plain if d in out and d not in by_window]
    summed = [d for d in by_plain if d not in out]
    own = sorted(d for d in by_window if d in out and d not in by_plain)
    if not (own and rows and summed) or any(d not in by_window for d in summed):
        return None
    return _Shape(windowed, batch, own, rows, summed)


def window_larger_than_output(op) -> bool:
    """Whether `op` is a convolution whose window (the summed loops that slide with result
    loops) covers more positions than the result loops it slides with: a filter gradient."""
    shape = _shape(op)
    if shape is None:
        return False
    maps = map_list(op.attributes["maps"])
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    window, output = set(), set()
    for expr in maps[shape.windowed].results:
        coeffs = ix.linear_form(expr)[0]
        if len(coeffs) > 1:
            window |= {d for d in coeffs if d in shape.summed}
            output |= {d for d in coeffs if d not in shape.summed}
    return bool(window) and prod(domain[d] for d in window) > prod(domain[d] for d in output)


def _copy(source, read_map, shape: list[int], ip):
    """An sft.map copying `source` as `read_map` reads it into a new tensor of `shape`."""
    kind = element_type(source)
    result = tm.RankedTensorType.get(shape, kind)
    copy = dialect.create("sft.map", [source], {"maps": maps_attr([read_map])}, [result],
                          regions=1, ip=ip)
    block = copy.regions[0].blocks.append(kind)
    with tm.InsertionPoint(block):
        tm.Operation.create("gpu.yield", operands=[block.arguments[0]])
    return copy.results[0]


def _groups(*groups: list) -> list[list[int]]:
    """The positions of `groups` of loops laid out one after another, empty groups left out."""
    found, start = [], 0
    for group in groups:
        if group:
            found.append(list(range(start, start + len(group))))
        start += len(group)
    return found


def _read_as(maps_results, loops: list[int], n_loops: int) -> "tm.AffineMap":
    """Expressions over the contraction's `n_loops` loops, read over `loops` (loop d becomes
    position loops.index(d); the expressions read no other loop)."""
    relabel = ix.affine_map(len(loops), [ix.d(loops.index(d)) if d in loops else ix.c(0)
                                         for d in range(n_loops)])
    return ix.affine_map(len(loops), [e.compose(relabel) for e in maps_results])


def im2col(op, shape: _Shape) -> None:
    maps = map_list(op.attributes["maps"])
    domain = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    out = ix.plain_dims(maps[2])
    ins = dialect.inputs(op)
    ip = tm.InsertionPoint(op)
    b, s, w, r = shape.batch, shape.summed, shape.own, shape.rows
    extent = lambda dims: [domain[d] for d in dims]  # noqa: E731
    merged = lambda *groups: [prod(extent(g)) for g in groups if g]  # noqa: E731
    with op.location:
        # the patches, [batch, summed, own], read through the windowed operand's map
        windowed = maps[shape.windowed].results
        patches = _copy(ins[shape.windowed], _read_as(windowed, b + s + w, len(domain)),
                        extent(b + s + w), ip)
        # the other operand as [batch, rows, summed]
        other, other_map = ins[1 - shape.windowed], maps[1 - shape.windowed]
        if ix.plain_dims(other_map) != b + r + s:
            other = _copy(other, _read_as(other_map.results, b + r + s, len(domain)),
                          extent(b + r + s), ip)
        lhs = create_view(other, ix.collapse_map(extent(b + r + s), _groups(b, r, s)),
                          merged(b, r, s), ip)
        rhs = create_view(patches, ix.collapse_map(extent(b + s + w), _groups(b, s, w)),
                          merged(b, s, w), ip)
        # the matmul: [batch, rows, summed] x [batch, summed, own] -> [batch, rows, own]
        batch = [ix.d(0)] if b else []
        m, n, k = (ix.d(len(batch) + i) for i in range(3))
        mm_maps = [ix.affine_map(len(batch) + 3, batch + pair) for pair in ([m, k], [k, n], [m, n])]
        result_type = tm.RankedTensorType.get(merged(b, r, w), element_type(dialect.init(op)))
        fill = dialect.fill_value(operation(dialect.init(op).owner))
        init = dialect.create_fill(fill, result_type, ip)
        attrs = {"domain": tm.DenseI64ArrayAttr.get(merged(b, r, w, s)), "maps": maps_attr(mm_maps)}
        product = dialect.create("sft.contract", [lhs, rhs], attrs, [result_type], init=init,
                                 ip=ip).results[0]
        # back to the result: split [batch, rows, own] into its loops, then in the result's order
        loops = b + r + w
        result = create_view(product, ix.expand_map(extent(loops), _groups(b, r, w)),
                             extent(loops), ip)
        if loops != out:
            back = ix.affine_map(len(out), [ix.d(out.index(d)) for d in loops])
            result = create_view(result, back, extent(out), ip)
    old_init = operation(dialect.init(op).owner)
    op.results[0].replace_all_uses_with(result)
    op.erase()
    if not any(has_uses(v) for v in old_init.results):
        old_init.erase()


@dataclass(frozen=True)
class Im2colPass:
    """Convolutions as a patch copy and a matmul: {ops=ID,...}."""

    ops: tuple[int, ...] = ()
    name = "sft-im2col"

    @classmethod
    def from_options(cls, text: str) -> "Im2colPass":
        """`ops=ID,ID` (sft-opt -p 'sft-im2col{ops=3}')."""
        return cls(op_ids_option(cls.name, text))

    def __call__(self, module) -> None:
        rewrite_ops(module, self.ops, _shape, im2col, "plan rewrites op {} as a patch copy and a "
                    "matmul, but it is not a convolution with a fill as init")


def filter_gradients(module) -> tuple[int, ...]:
    """Op ids of the convolutions whose window is larger than their output (filter
    gradients), which sft-im2col rewrites wherever it finds them."""
    with module.context:
        return tuple(i for i, op in enumerate(compute_ops(module)) if window_larger_than_output(op))


KIND = DecisionKind(
    field="im2col", type="tuple[int, ...]", default=(),
    doc="convolutions (op ids) computed as a copy of their input's patches and a matmul",
    parse=ints, stage=SFT, make_pass=Im2colPass,
    describe=lambda ops: f"im2col ops {list(ops)}")
