"""Kernel code generation on IREE's CPU pipeline: the tile space of `space/tiles.py` for the
host's vector ISA, ranked by the analytical model of `cost/model.py`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.hardware import TargetDesc
from ..cost.host import HostISA
from ..cost.model import predict
from ..decisions.cpu_tiles import row_of_iree
from ..space.kernels import Kernel
from ..space.tiles import TileSpace, tile_space

# On a host never calibrated, a tile config replaces IREE's own only where it is predicted this
# much faster. The detected defaults rank well (pairwise 0.90 to 0.96 on synthetic kernels,
# timed here) but not well enough near the top: with no margin their pick lost to IREE's
# default by up to 7% on one kernel of nine under AVX2; with 15% it lost on none, and kept a
# 16% gain (geomean) under AVX-512.
UNCALIBRATED_MARGIN = 0.15


@dataclass(frozen=True)
class CpuCodegen:
    isa: HostISA
    margin: float = 0.0  # predicted gain a tile config needs over IREE's (0: calibrated host)

    def space(self, kernel: Kernel) -> TileSpace:
        return tile_space(kernel, isa=self.isa)

    def default(self, kernel: Kernel, dispatch) -> tuple:
        return row_of_iree(kernel.roles, dispatch.config if dispatch is not None else None)

    def predict(self, kernel: Kernel, candidates: np.ndarray, desc: TargetDesc, cores: int,
                default: tuple) -> np.ndarray:
        """The model's seconds per candidate, those other than IREE's default (zero rows)
        counted `margin` slower: the model's uncertainty where it was not calibrated."""
        times = predict(kernel, candidates, desc, cores, default)
        if self.margin:
            times = np.where(np.all(candidates == 0, axis=1), times, times * (1.0 + self.margin))
        return times
