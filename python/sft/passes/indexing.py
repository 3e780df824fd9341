"""Index algebra on affine maps: the maps that views, reshapes and slices stand for."""

from __future__ import annotations

from math import prod

from ..ir import tm


def dims_of(expr) -> set[int]:
    """Loop dims an affine expression reads."""
    if isinstance(expr, tm.AffineDimExpr):
        return {expr.position}
    if isinstance(expr, tm.AffineBinaryExpr):
        return dims_of(expr.lhs) | dims_of(expr.rhs)
    return set()


def linear_form(expr) -> tuple[dict[int, int], int] | None:
    """`expr` as ({dim: coefficient}, constant), or None when it uses floordiv, mod or symbols."""
    if isinstance(expr, tm.AffineDimExpr):
        return {expr.position: 1}, 0
    if isinstance(expr, tm.AffineConstantExpr):
        return {}, expr.value
    if isinstance(expr, tm.AffineAddExpr):
        lhs, rhs = linear_form(expr.lhs), linear_form(expr.rhs)
        if lhs is None or rhs is None:
            return None
        coeffs = dict(lhs[0])
        for dim, c in rhs[0].items():
            coeffs[dim] = coeffs.get(dim, 0) + c
        return coeffs, lhs[1] + rhs[1]
    if isinstance(expr, tm.AffineMulExpr):
        lhs, rhs = linear_form(expr.lhs), linear_form(expr.rhs)
        if lhs is None or rhs is None or (lhs[0] and rhs[0]):
            return None
        (coeffs, const), scale = (lhs, rhs[1]) if lhs[0] else (rhs, lhs[1])
        return {d: c * scale for d, c in coeffs.items()}, const * scale
    return None


def plain_dim(expr) -> int | None:
    return expr.position if isinstance(expr, tm.AffineDimExpr) else None


def plain_dims(m) -> list[int] | None:
    """The loop each result of `m` reads, when every result is a single loop; else None."""
    dims = [plain_dim(e) for e in m.results]
    return None if None in dims else dims


def affine_map(n_dims: int, exprs) -> "tm.AffineMap":
    return tm.AffineMap.get(n_dims, 0, list(exprs))


def d(i: int):
    return tm.AffineDimExpr.get(i)


def c(v: int):
    return tm.AffineConstantExpr.get(v)


def expand_map(result_shape: list[int], groups: list[list[int]]) -> "tm.AffineMap":
    """View map of an expand_shape: each source dim is a row-major sum over its result dims."""
    exprs = []
    for group in groups:
        expr = c(0)
        for j, r in enumerate(group):
            expr = expr + d(r) * c(prod(result_shape[q] for q in group[j + 1 :]))
        exprs.append(expr)
    return affine_map(len(result_shape), exprs)


def collapse_map(source_shape: list[int], groups: list[list[int]]) -> "tm.AffineMap":
    """View map of a collapse_shape: each source dim is a digit of its merged result dim."""
    if not groups:  # to rank 0: every source dim is a unit dim, read at index 0
        return affine_map(0, [c(0)] * len(source_shape))
    exprs = []
    for r, group in enumerate(groups):
        for j, s in enumerate(group):
            digit = tm.AffineExpr.get_floor_div(d(r), prod(source_shape[q] for q in group[j + 1 :]))
            exprs.append(digit if j == 0 else tm.AffineExpr.get_mod(digit, source_shape[s]))
    return affine_map(len(groups), exprs)


def reshape_groups(view_map, source_shape: list[int], result_shape: list[int]):
    """('expand'|'collapse', reassociation) when `view_map` is exactly a reshape, else None."""
    exprs = list(view_map.results)
    if len(result_shape) > len(source_shape):
        groups = [sorted(dims_of(e)) for e in exprs]
        if sorted(sum(groups, [])) != list(range(len(result_shape))):
            return None
        if expand_map(result_shape, groups) == view_map:
            return "expand", groups
        return None
    if len(result_shape) < len(source_shape):
        owner: list[int | None] = []
        for e in exprs:
            used = dims_of(e)
            owner.append(used.pop() if len(used) == 1 else None)
        # A unit source dim collapses to the constant 0: it joins its neighbour's group.
        for i in range(len(owner)):
            if owner[i] is None:
                near = [owner[j] for j in (*range(i - 1, -1, -1), *range(i + 1, len(owner)))]
                owner[i] = next((o for o in near if o is not None), 0)
        groups = [[s for s, o in enumerate(owner) if o == r] for r in range(len(result_shape))]
        if [s for g in groups for s in g] != list(range(len(source_shape))) or not all(groups):
            return None
        if collapse_map(source_shape, groups) == view_map:
            return "collapse", groups
    return None
