"""Kernel code generation on IREE's CPU pipeline: the tile space of `space/tiles.py` for the
host's vector ISA, ranked by the analytical model of `cost/model.py`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.hardware import TargetDesc
from ..cost.host import HostISA
from ..cost.model import default_candidate, predict
from ..space.kernels import Kernel
from ..space.tiles import TileSpace, tile_space


@dataclass(frozen=True)
class CpuCodegen:
    isa: HostISA

    def space(self, kernel: Kernel) -> TileSpace:
        return tile_space(kernel, isa=self.isa)

    def default(self, kernel: Kernel, dispatch) -> tuple:
        return default_candidate(kernel, dispatch)

    def predict(self, kernel: Kernel, candidates: np.ndarray, desc: TargetDesc, cores: int,
                default: tuple) -> np.ndarray:
        return predict(kernel, candidates, desc, cores, default)
