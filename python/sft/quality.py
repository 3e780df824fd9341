"""How good is the cost model? Rank agreement between predicted and measured kernel times.

Candidates are sampled per kernel (the model's top few, IREE's default, and a seeded random
spread of the rest), each kernel is timed alone, and agreement is scored within each kernel:
Spearman's rho, pairwise ordering accuracy, whether the measured best is among the predicted
top-1 / top-5, and how much slower the predicted best is than the measured best.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .space.kernels import Kernel


NOISE = 0.03  # measured times closer than this are not ordered (identical modules vary so much)


def ordered_pairs(predicted: list[float], measured: list[float], noise: float | list[float] = NOISE
                  ) -> tuple[int, int]:
    """(pairs the prediction orders as measured, pairs) among those whose measured times differ
    by more than `noise` (closer than that, the order is noise); a list gives each candidate's
    own noise, and a pair the larger of its two."""
    spread = noise if isinstance(noise, list) else [noise] * len(measured)
    good = total = 0
    for i, j in itertools.combinations(range(len(measured)), 2):
        mi, mj = measured[i], measured[j]
        if abs(mi - mj) <= max(spread[i], spread[j]) * min(mi, mj):
            continue
        total += 1
        good += (predicted[i] < predicted[j]) == (mi < mj)
    return good, total


@dataclass
class KernelQuality:
    kernel: Kernel
    indices: list[int]
    predicted: list[float]
    measured: list[float]

    def pairs(self) -> tuple[int, int]:
        """(correctly ordered pairs, pairs) among the candidates (`ordered_pairs`)."""
        return ordered_pairs(self.predicted, self.measured)

    def spearman(self) -> float:
        from scipy.stats import spearmanr

        return float(spearmanr(self.predicted, self.measured).statistic)

    def recall(self, k: int) -> bool:
        best_measured = int(np.argmin(self.measured))
        return best_measured in list(np.argsort(self.predicted, kind="stable")[:k])

    def regret(self) -> float:
        """Measured time of the predicted best over the measured best (1.0 is perfect)."""
        return self.measured[int(np.argmin(self.predicted))] / min(self.measured)

    def versus_default(self) -> float:
        """Measured time of the predicted best over IREE's default (candidate 0; below 1: the
        model's pick beats IREE's own); nan where the default was not timed."""
        if 0 not in self.indices:
            return float("nan")
        return self.measured[int(np.argmin(self.predicted))] / self.measured[self.indices.index(0)]


def sample_candidates(kernel: Kernel, target, default, count: int, top: int = 5, seed: int = 0):
    """(space, indices, predicted seconds) on one core of `target`: the model's top `top`,
    IREE's default and a random spread of the rest, `count` in all."""
    space = target.codegen.space(kernel)
    times = target.codegen.predict(kernel, space.candidates, target.desc, 1, default)
    order = [int(i) for i in np.argsort(times, kind="stable")]
    chosen = list(dict.fromkeys([*order[:top], 0]))
    rest = [i for i in order if i not in chosen]
    rng = np.random.default_rng(seed)
    chosen += [int(i) for i in rng.choice(rest, size=max(0, min(len(rest), count - len(chosen))), replace=False)]
    return space, chosen, [float(times[i]) for i in chosen]


def summarize(results: list[KernelQuality]) -> dict:
    """The metrics over all kernels: pairwise accuracy over every kernel's counted pairs, the
    means of Spearman and recall, and geomean and max of the regret and of the predicted
    best's time over IREE's default."""
    good = sum(r.pairs()[0] for r in results)
    total = sum(r.pairs()[1] for r in results)
    regrets = [r.regret() for r in results]
    versus = [v for v in (r.versus_default() for r in results) if np.isfinite(v)]
    return {
        "kernels": len(results),
        "candidates": sum(len(r.indices) for r in results),
        "pairwise_accuracy": good / total if total else float("nan"),
        "pairs": total,
        "spearman_mean": float(np.mean([r.spearman() for r in results])),
        "top1_recall": float(np.mean([r.recall(1) for r in results])),
        "top5_recall": float(np.mean([r.recall(5) for r in results])),
        "regret_geomean": float(np.exp(np.mean(np.log(regrets)))),
        "regret_max": float(max(regrets)),
        # The predicted best against IREE's default, measured: what `search="model"` gains.
        "vs_default_geomean": float(np.exp(np.mean(np.log(versus)))) if versus else float("nan"),
        "vs_default_max": float(max(versus)) if versus else float("nan"),
    }

