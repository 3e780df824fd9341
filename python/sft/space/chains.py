"""Chains of contractions and the orders they can be evaluated in (graph-level algebra).

Two contractions where the first's result feeds only the second compute one three-operand sum
of products: R = sum X * Y * Z over every index that R does not keep. Summing is associative,
so the pair contracted first is a free choice: (X Y) Z as written, X (Y Z), or (X Z) Y. The
orders can differ in work by the ratio of the tensor sizes: linear attention's (Q K^T) V costs
n/d times Q (K^T V). Each tensor is described by the ids of its indices, shared across the
chain, so that an order is plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import dialect
from ..ir import tm
from ..passes import indexing as ix
from ..passes.common import element_bytes, functions, map_list, ops_of
from .kernels import Kernel, roles_of

# Which two of (X, Y, Z) are contracted first; order 0 is the program as written.
PAIRINGS = ((0, 1), (1, 2), (0, 2))
INTERMEDIATE = 3


@dataclass(frozen=True)
class Step:
    """One contraction of an order: out[out] = sum over the other indices of lhs[lhs] * rhs[rhs]."""

    lhs: tuple[int, ...]
    rhs: tuple[int, ...]
    out: tuple[int, ...]
    sources: tuple[int, int]  # what lhs and rhs are: 0, 1, 2 for X, Y, Z; 3 for the intermediate

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


@dataclass(frozen=True)
class Chain:
    """X, Y: the first contraction's operands; Z: the second's other operand; output: R's
    indices; extents: the size of each index id."""

    op_id: int                         # the second contraction's sft op id, as written
    operands: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    output: tuple[int, ...]
    extents: tuple[int, ...]
    element_bytes: int

    def steps(self, order: int) -> tuple[Step, Step]:
        """The two contractions of `order`: the pair first, into an intermediate that keeps the
        indices the rest still needs (R's in R's order, then the third operand's)."""
        i, j = PAIRINGS[order]
        (rest,) = {0, 1, 2} - {i, j}
        a, b, c = self.operands[i], self.operands[j], self.operands[rest]
        pair = set(a + b)
        kept = [x for x in self.output if x in pair]
        kept += [x for x in c if x in pair and x not in kept]
        first = _ordered((i, a), (j, b), tuple(kept))
        return first, _ordered((INTERMEDIATE, tuple(kept)), (rest, c), self.output)

    def legal_orders(self) -> list[int]:
        """Orders whose every step sums at least one index: an outer product materialises a
        tensor as large as both operands times each other, to save nothing."""
        return [o for o in range(len(PAIRINGS))
                if all(set(s.lhs + s.rhs) - set(s.out) for s in self.steps(o))]

    def flops(self, order: int) -> float:
        return sum(2.0 * math.prod(self.extents[i] for i in s.loops) for s in self.steps(order))

    def kernels(self, order: int) -> list[Kernel | None]:
        """The steps as kernels for the cost model (None where a step is not matmul-like)."""
        found = []
        for step in self.steps(order):
            loops = step.loops
            roles = roles_of([loops.index(i) for i in step.out], len(loops))
            found.append(None if roles is None else Kernel(
                -1, tuple(self.extents[i] for i in loops), roles, self.element_bytes, step.maps()))
        return found


def _ordered(a, b, out) -> Step:
    """lhs is the operand that holds the result's row index (second to last), as in A @ B;
    `a` and `b` are (source, indices)."""
    if len(out) >= 2 and out[-2] in b[1] and out[-2] not in a[1]:
        a, b = b, a
    return Step(tuple(a[1]), tuple(b[1]), tuple(out), (a[0], b[0]))


def is_zero_fill(value) -> bool:
    """A tensor made by an sft.map with no inputs that yields the constant 0."""
    scalar = dialect.fill_value(getattr(value.owner, "operation", value.owner))
    yielded = getattr(scalar.owner, "operation", None) if scalar is not None else None
    if getattr(yielded, "name", "") != "arith.constant":
        return False
    attr = yielded.attributes["value"]
    try:
        return tm.FloatAttr(attr).value == 0.0
    except ValueError:
        return tm.IntegerAttr(attr).value == 0


@dataclass
class Site:
    """Where a chain is in the IR: its two contraction ops and their operands."""

    chain: Chain
    first: object
    second: object
    x: object
    y: object
    z: object


def _site(first, second, op_id: int) -> Site | None:
    maps1, maps2 = map_list(first.attributes["maps"]), map_list(second.attributes["maps"])
    dom1 = list(tm.DenseI64ArrayAttr(first.attributes["domain"]))
    dom2 = list(tm.DenseI64ArrayAttr(second.attributes["domain"]))
    plain1, plain2 = [ix.plain_dims(m) for m in maps1], [ix.plain_dims(m) for m in maps2]
    if None in plain1 or None in plain2 or len(maps1) != 3 or len(maps2) != 3:
        return None
    ins2 = dialect.inputs(second)
    slot = 0 if ins2[0] == first.results[0] else 1
    out1, read = plain1[2], plain2[slot]
    if len(set(out1)) != len(out1) or len(set(read)) != len(read) or len(set(plain2[2])) != len(plain2[2]):
        return None
    # Ids: the second contraction's loops keep theirs; the first's kept loops take the id of the
    # loop that reads them in the second; its summed loops get new ids.
    ids, extents = {}, list(dom2)
    for a in range(len(dom1)):
        if a in out1:
            ids[a] = read[out1.index(a)]
        else:
            ids[a] = len(extents)
            extents.append(dom1[a])
    operands = (tuple(ids[a] for a in plain1[0]), tuple(ids[a] for a in plain1[1]),
                tuple(plain2[1 - slot]))
    chain = Chain(op_id, operands, tuple(plain2[2]), tuple(extents), element_bytes(second.results[0]))
    x, y = dialect.inputs(first)
    return Site(chain, first, second, x, y, ins2[1 - slot])


def chain_sites(block) -> list[Site]:
    """Chains in program order; a contraction belongs to at most one (the first it is found in).
    The first contraction must start from zero and feed nothing but the second."""
    sites, used, op_id = [], [], 0
    for op in ops_of(block):
        if op.name not in dialect.COMPUTE_OPS:
            continue
        if op.name == "sft.contract" and not any(op == u for u in used):
            for value in dialect.inputs(op):
                first = value.owner
                first = getattr(first, "operation", first)
                if (getattr(first, "name", "") != "sft.contract" or any(first == u for u in used)
                        or len(list(first.results[0].uses)) != 1
                        or not is_zero_fill(dialect.init(first))):
                    continue
                site = _site(first, op, op_id)
                if site is not None:
                    sites.append(site)
                    used += [first, op]
                    break
        op_id += 1
    return sites


def contraction_chains(module) -> list[Chain]:
    return [s.chain for func in functions(module) for s in chain_sites(func.regions[0].blocks[0])]
