"""Exact search: given the fusion partition, kernels are independent, so the best plan is the
best candidate of each kernel (dynamic programming degenerates to per-kernel minima)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..cost.model import predict
from ..cost.targets import TargetDesc
from ..space.kernels import Kernel
from ..space.tiles import TileSpace, tile_space


@dataclass(frozen=True)
class KernelChoice:
    kernel: Kernel
    space: TileSpace
    ranked: tuple[int, ...]            # candidate indices, best predicted first
    predicted: tuple[float, ...]       # their predicted seconds

    @property
    def best(self) -> int:
        return self.ranked[0]

    def default_prediction(self) -> float:
        return float(self.predicted[self.ranked.index(0)])


@dataclass
class SearchReport:
    choices: list[KernelChoice] = field(default_factory=list)
    scored: int = 0
    seconds: float = 0.0
    fallback: bool = False  # the chosen plan failed to compile; IREE's default was used
    measured: dict = field(default_factory=dict)  # op id -> {candidate index: seconds}
    failed: list = field(default_factory=list)    # (op id, candidate index) IREE refused

    @property
    def space_size_log10(self) -> float:
        """log10 of the number of whole-program plans covered (product over kernels)."""
        return sum(math.log10(len(c.space)) for c in self.choices)

    def summary(self) -> str:
        rate = self.scored / self.seconds if self.seconds else float("inf")
        return (f"{len(self.choices)} kernels, space 10^{self.space_size_log10:.1f} plans, "
                f"{self.scored} candidates scored in {self.seconds * 1e3:.1f} ms ({rate:.2e}/s)")


def search_kernels(kernels: list[Kernel], target: TargetDesc, top_k: int = 5) -> SearchReport:
    report = SearchReport()
    start = time.perf_counter()
    for kernel in kernels:
        space = tile_space(kernel)
        times = predict(kernel, space.candidates, target)
        order = np.argsort(times, kind="stable")
        keep = list(order[:top_k])
        if 0 not in keep:
            keep.append(0)  # IREE's default always stays in the running
        report.choices.append(KernelChoice(kernel, space, tuple(int(i) for i in keep),
                                           tuple(float(times[i]) for i in keep)))
        report.scored += len(space)
    report.seconds = time.perf_counter() - start
    return report
