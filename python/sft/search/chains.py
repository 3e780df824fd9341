"""Dynamic programming with branch and bound over the evaluation orders of contraction chains.

Chains are disjoint, so each is decided alone. The best order of a group of operands is the
best split of the group into two, each side in its own best order, plus the contraction that
joins them: dynamic programming over subsets (the optimal-einsum recurrence), exact. A split is
pruned unscored when its sides' best times plus the joining step's compute floor (its work at
the target description's f32 peak rate, which no codegen's model goes below for f32 work)
already reach the best split found. A step is scored by the target's codegen under its best
candidate (the kernel search that follows picks the config): on a GPU target by the GPU's
space and model, never this host's tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..cost.model import compute_floor, untiled_contraction
from ..decisions.orders import Tree
from ..space.chains import Chain, Step, step_flops
from ..targets import Target


@dataclass(frozen=True)
class OrderChoice:
    chain: Chain
    order: Tree                        # the order picked (chain.written when nothing beats it)
    predicted: float                   # its predicted seconds
    written_predicted: float           # the order as written, predicted
    scored: int                        # tile candidates scored
    pruned: int                        # splits cut by their lower bound
    orders: int                        # orders the search covered

    def to_dict(self) -> dict:
        return {"op": self.chain.op_id, "order": self.order, "written": self.chain.written,
                "flops": self.chain.flops(self.order), "written_flops": self.chain.flops(self.chain.written),
                "predicted_s": self.predicted, "written_predicted_s": self.written_predicted,
                "orders_covered": self.orders, "splits_pruned": self.pruned}


class _StepCost:
    """Predicted seconds of one step, remembered (the same step recurs across splits)."""

    def __init__(self, chain: Chain, target: Target, cores: int):
        self.chain, self.target, self.cores = chain, target, cores
        self.known: dict[tuple, float] = {}
        self.scored = 0

    def floor(self, step: Step) -> float:
        # The description's peak is f32's (a GPU's with the intrinsics that take f32 where it
        # has them): a bound for f32 steps. Narrower types can beat it (a GPU's f16 intrinsics,
        # wider CPU vectors): no floor, so nothing is pruned that could win.
        if self.chain.element_bytes < 4:
            return 0.0
        return compute_floor(step_flops(self.chain, step), self.target.desc, self.cores)

    def __call__(self, step: Step) -> float:
        key = (step.lhs, step.rhs, step.out)
        if key not in self.known:
            codegen = self.target.searched_codegen
            # No codegen searched (IREE's configs everywhere): every step as a contraction not tiled.
            kernel = self.chain.kernel(step) if codegen is not None else None
            if kernel is None:
                nbytes = self.chain.element_bytes * sum(
                    math.prod(self.chain.extents[i] for i in t) for t in (step.lhs, step.rhs, step.out))
                self.known[key] = untiled_contraction(step_flops(self.chain, step), nbytes,
                                                      self.target.desc, self.cores)
            else:
                # A step has no dispatch yet: IREE's default is the codegen's for an unseen one.
                space = codegen.space(kernel)
                times = codegen.predict(kernel, space.candidates, self.target.desc, self.cores,
                                        codegen.default(kernel, None))
                self.known[key] = float(times.min())
                self.scored += len(space)
        return self.known[key]


def choose_order(chain: Chain, target: Target, cores: int) -> OrderChoice:
    cost = _StepCost(chain, target, cores)
    n = len(chain.operands)
    best: dict[frozenset, tuple[float, Tree]] = {frozenset([i]): (0.0, i) for i in range(n)}
    count: dict[frozenset, int] = {frozenset([i]): 1 for i in range(n)}
    pruned = 0
    groups = sorted((frozenset(i for i in range(n) if mask >> i & 1) for mask in range(1, 1 << n)), key=len)
    for group in groups:
        if len(group) < 2:
            continue
        first, rest = min(group), sorted(group - {min(group)})
        found, count[group] = (math.inf, None), 0
        for mask in range(1 << len(rest)):  # the side holding `first` fixes each split once
            side = frozenset([first] + [r for b, r in enumerate(rest) if mask >> b & 1])
            other = group - side
            if not other or side not in best or other not in best:
                continue
            step = chain.step((0, side), (1, other))
            if not set(step.lhs + step.rhs) - set(step.out):
                continue  # an outer product: not an order (Chain.is_order)
            count[group] += count[side] * count[other]
            base = best[side][0] + best[other][0]
            if base + cost.floor(step) >= found[0]:
                pruned += 1
                continue
            total = base + cost(step)
            if total < found[0]:
                found = (total, (best[side][1], best[other][1]))
        if found[1] is not None:
            best[group] = found
    written = sum(cost(s) for s in chain.steps(chain.written))
    # No order at all when every split of the whole has an outer-product step: as written.
    predicted, order = best.get(frozenset(range(n)), (math.inf, chain.written))
    if written <= predicted:  # as written wins ties: a reorder must predict a gain
        predicted, order = written, chain.written
    return OrderChoice(chain, order, predicted, written, cost.scored, pruned,
                       count.get(frozenset(range(n)), 0))


def choose_orders(chains: list[Chain], target: Target, cores: int) -> list[OrderChoice]:
    return [choose_order(c, target, cores) for c in chains]


def plan_orders(choices: list[OrderChoice]) -> tuple[tuple[int, Tree], ...]:
    """The orders as a Plan holds them: (op id, tree), the chains kept as written left out."""
    return tuple((c.chain.op_id, c.order) for c in choices if c.order != c.chain.written)
