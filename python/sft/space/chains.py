"""Chains of contractions and the orders they can be evaluated in (graph-level algebra).

Contractions whose results each feed only the next compute one sum of products over all their
operands: R = sum X * Y * Z * ... over every index that R does not keep. Summing is associative
and commutative, so any binary tree over the operands computes R: an order is such a tree, the
leaves numbered as the program writes them. The orders can differ in work by the ratio of the
tensor sizes: linear attention's (Q K^T) V costs sequence/head-dim times Q (K^T V). Each tensor
is described by the ids of its indices, shared across the chain, so that an order is plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from .. import dialect
from ..ir import tm
from ..passes import indexing as ix
from ..passes.common import compute_ops, element_bytes, map_list
from ..decisions.orders import Tree
from .kernels import Kernel, roles_of

MAX_OPERANDS = 8  # 3^8 subset splits: the order search stays well under a second


@dataclass(frozen=True)
class Step:
    """One contraction of an order: out[out] = sum over the other indices of lhs[lhs] * rhs[rhs].
    sources: what lhs and rhs are, an operand number or, from the operand count up, the result
    of an earlier step."""

    lhs: tuple[int, ...]
    rhs: tuple[int, ...]
    out: tuple[int, ...]
    sources: tuple[int, int]

    @property
    def loops(self) -> tuple[int, ...]:
        """The step's loops as index ids: the result's in order, then the summed ones."""
        summed = sorted(set(self.lhs + self.rhs) - set(self.out))
        return self.out + tuple(summed)

    def maps(self) -> tuple[str, ...]:
        loops = self.loops
        head = "(" + ", ".join(f"d{i}" for i in range(len(loops))) + ")"
        return tuple(f"{head} -> (" + ", ".join(f"d{loops.index(i)}" for i in t) + ")"
                     for t in (self.lhs, self.rhs, self.out))


def leaves(tree: Tree) -> list[int]:
    return [tree] if isinstance(tree, int) else leaves(tree[0]) + leaves(tree[1])


@dataclass(frozen=True)
class Chain:
    """operands: each operand's index ids; output: R's; extents: the size of each index id;
    written: the order the program has."""

    op_id: int                         # the last contraction's sft op id
    operands: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    extents: tuple[int, ...]
    element_bytes: int
    written: Tree

    def kept(self, group: frozenset[int]) -> tuple[int, ...]:
        """The indices of the product of the operands in `group`: one operand's own; else those
        the rest still needs, R's in R's order, then the other operands', in operand order."""
        if len(group) == 1:
            return self.operands[next(iter(group))]
        if len(group) == len(self.operands):
            return self.output
        inside = {i for g in group for i in self.operands[g]}
        kept = [i for i in self.output if i in inside]
        for o in range(len(self.operands)):
            if o not in group:
                kept += [i for i in self.operands[o] if i in inside and i not in kept]
        return tuple(kept)

    def step(self, a: tuple[int, frozenset[int]], b: tuple[int, frozenset[int]]) -> Step:
        """The contraction of two products (source, operand group); lhs is the one that holds
        the result's row index (second to last), as in A @ B."""
        out = self.kept(a[1] | b[1])
        lhs, rhs = self.kept(a[1]), self.kept(b[1])
        if len(out) >= 2 and out[-2] in rhs and out[-2] not in lhs:
            (a, lhs), (b, rhs) = (b, rhs), (a, lhs)
        return Step(lhs, rhs, out, (a[0], b[0]))

    def steps(self, tree: Tree) -> list[Step]:
        """The contractions of an order, each after those it reads."""
        found: list[Step] = []

        def visit(node) -> tuple[int, frozenset[int]]:
            if isinstance(node, int):
                return node, frozenset([node])
            a, b = visit(node[0]), visit(node[1])
            found.append(self.step(a, b))
            return len(self.operands) + len(found) - 1, a[1] | b[1]

        visit(tree)
        return found

    def is_order(self, tree: Tree) -> bool:
        """A tree over every operand once whose every step sums at least one index: an outer
        product materialises a tensor as large as both operands times each other, to save
        nothing."""
        return (sorted(leaves(tree)) == list(range(len(self.operands)))
                and all(set(s.lhs + s.rhs) - set(s.out) for s in self.steps(tree)))

    def flops(self, tree: Tree) -> float:
        return sum(step_flops(self, s) for s in self.steps(tree))

    def kernel(self, step: Step) -> Kernel | None:
        """A step as a kernel for the cost model (None where it is not matmul-like)."""
        loops = step.loops
        roles = roles_of([loops.index(i) for i in step.out], len(loops))
        return None if roles is None else Kernel(
            -1, tuple(self.extents[i] for i in loops), roles, self.element_bytes, step.maps())


def step_flops(chain: Chain, step: Step) -> float:
    return 2.0 * math.prod(chain.extents[i] for i in step.loops)


@dataclass
class Site:
    """Where a chain is in the IR: its contractions (the last one last), its operands' values
    and the zero its intermediates start from."""

    chain: Chain
    contractions: list
    values: list
    zero: object


class _Builder:
    """Grows a chain down from its last contraction through results read only once."""

    def __init__(self, used: list):
        self.used, self.contractions, self.values, self.operands = used, [], [], []
        self.extents: list[int] = []
        self.zero = None

    def absorbable(self, value) -> bool:
        op = getattr(value.owner, "operation", value.owner)
        return (getattr(op, "name", "") == "sft.contract" and not any(op == u for u in self.used)
                and len(list(op.results[0].uses)) == 1 and _zero(dialect.init(op)) is not None
                and _maps(op) is not None and len(self.values) + 2 <= MAX_OPERANDS)

    def grow(self, op, ids: list[int]) -> Tree:
        """The subtree `op` computes; `ids` gives the chain's index id of each of its loops."""
        self.contractions.append(op)
        maps = _maps(op)
        nodes = []
        for value, used in zip(dialect.inputs(op), maps[:2]):
            if self.absorbable(value):
                inner = getattr(value.owner, "operation", value.owner)
                self.zero = self.zero or _zero(dialect.init(inner))
                inner_maps = _maps(inner)
                inner_ids = []
                domain = list(tm.DenseI64ArrayAttr(inner.attributes["domain"]))
                for a, size in enumerate(domain):
                    if a in inner_maps[2]:
                        inner_ids.append(ids[used[inner_maps[2].index(a)]])
                    else:
                        inner_ids.append(len(self.extents))
                        self.extents.append(size)
                nodes.append(self.grow(inner, inner_ids))
            else:
                nodes.append(len(self.values))
                self.values.append(value)
                self.operands.append(tuple(ids[d] for d in used))
        return (nodes[0], nodes[1])


def _maps(op) -> list[list[int]] | None:
    """The contraction's maps as loop lists, when each is plain and the result's repeats none."""
    maps = [ix.plain_dims(m) for m in map_list(op.attributes["maps"])]
    if None in maps or len(maps) != 3 or len(set(maps[2])) != len(maps[2]):
        return None
    return maps


def _zero(value):
    """The zero scalar a tensor is filled with, or None when it is not a fill of zero."""
    scalar = dialect.fill_value(getattr(value.owner, "operation", value.owner))
    constant = getattr(scalar.owner, "operation", None) if scalar is not None else None
    if getattr(constant, "name", "") != "arith.constant":
        return None
    attr = constant.attributes["value"]
    try:
        return scalar if tm.FloatAttr(attr).value == 0.0 else None
    except ValueError:
        return scalar if tm.IntegerAttr(attr).value == 0 else None


def chain_sites(module) -> list[Site]:
    """Chains of two or more contractions in any function of the module, found from the last
    contraction of each (its op id names the chain); a contraction belongs to one chain at
    most. Every contraction but the last must start from zero and feed nothing but the next,
    and every map must be plain (each index one loop)."""
    compute = compute_ops(module)
    sites, used = [], []
    for op_id in reversed(range(len(compute))):
        op = compute[op_id]
        if op.name != "sft.contract" or any(op == u for u in used) or _maps(op) is None:
            continue
        builder = _Builder(used)
        builder.extents = list(tm.DenseI64ArrayAttr(op.attributes["domain"]))
        written = builder.grow(op, list(range(len(builder.extents))))
        if len(builder.contractions) < 2:
            continue
        used += builder.contractions
        chain = Chain(op_id, tuple(builder.operands), tuple(_maps(op)[2]), tuple(builder.extents),
                      element_bytes(op.results[0]), written)
        sites.append(Site(chain, builder.contractions[::-1], builder.values, builder.zero))
    return sites[::-1]


def contraction_chains(module) -> list[Chain]:
    return [s.chain for s in chain_sites(module)]
