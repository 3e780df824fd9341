"""Branch and bound over the evaluation orders of contraction chains.

Chains are disjoint, so each is decided alone. A chain's orders are visited cheapest lower bound
first (its work at peak rate, `compute_floor`); an order whose bound is no better than the best
predicted time found so far is pruned without being scored. An order is scored as the sum of its
steps, each under its best tile candidate (the tile search that follows picks the tiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..cost.model import compute_floor, predict, untiled_contraction
from ..cost.targets import TargetDesc
from ..space.chains import Chain
from ..space.tiles import tile_space


@dataclass(frozen=True)
class OrderChoice:
    chain: Chain
    order: int                         # the order picked (0: as written)
    predicted: dict                    # order -> predicted seconds, for those scored
    pruned: tuple[int, ...]            # orders cut by their lower bound
    scored: int                        # tile candidates scored

    def to_dict(self) -> dict:
        return {"op": self.chain.op_id, "order": self.order,
                "flops": {o: self.chain.flops(o) for o in self.chain.legal_orders()},
                "predicted_s": self.predicted, "pruned": list(self.pruned)}


def _score(chain: Chain, order: int, target: TargetDesc, cores: int) -> tuple[float, int]:
    total, scored = 0.0, 0
    for step, kernel in zip(chain.steps(order), chain.kernels(order)):
        if kernel is None:
            loops = [chain.extents[i] for i in step.loops]
            nbytes = chain.element_bytes * sum(math.prod(chain.extents[i] for i in t)
                                               for t in (step.lhs, step.rhs, step.out))
            total += untiled_contraction(2.0 * math.prod(loops), nbytes, target, cores)
            continue
        space = tile_space(kernel)
        total += float(predict(kernel, space.candidates, target, cores).min())
        scored += len(space)
    return total, scored


def choose_order(chain: Chain, target: TargetDesc, cores: int) -> OrderChoice:
    legal = chain.legal_orders()
    bound = {o: compute_floor(chain.flops(o), target, cores) for o in legal}
    best, best_time, predicted, pruned, scored = 0, math.inf, {}, [], 0
    for order in sorted(legal, key=lambda o: (bound[o], o)):
        if bound[order] >= best_time:
            pruned.append(order)
            continue
        predicted[order], n = _score(chain, order, target, cores)
        scored += n
        # As written wins ties: a reorder must predict a gain to be taken.
        if predicted[order] < best_time or (order == 0 and predicted[order] <= best_time):
            best, best_time = order, predicted[order]
    return OrderChoice(chain, best, predicted, tuple(pruned), scored)


def choose_orders(chains: list[Chain], target: TargetDesc, cores: int) -> list[OrderChoice]:
    return [choose_order(c, target, cores) for c in chains]
