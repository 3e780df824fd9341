"""The tile space of a contraction kernel on IREE's CPU pipeline, and its legality rules.

A candidate is (dm, dn, vm, vn, vk): distribution tiles on m and n (one workgroup computes a
dm x dn block), vector tiles vm x vn (the register block) and the reduction step vk. Candidates
live in numpy arrays so that millions are generated and scored at once. Index 0 of every space
is IREE's own choice (no compilation_info), which the search always keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.host import HostISA, host_isa
from ..decisions.cpu_tiles import ROW, TileConfig, config_of_row
from .kernels import Kernel

FIELDS = ROW


def _sizes(extent: int, choices, whole: bool = True) -> np.ndarray:
    """Tile sizes no larger than the extent; the whole extent too when `whole` (or when no
    choice fits)."""
    vals = {c for c in choices if c <= extent}
    if whole or not vals:
        vals.add(extent)
    return np.array(sorted(vals), dtype=np.int64)


@dataclass(frozen=True)
class TileSpace:
    kernel: Kernel
    candidates: np.ndarray  # shape (count, 5), columns FIELDS; row 0 is IREE's default (zeros)

    def __len__(self) -> int:
        return len(self.candidates)

    def config(self, index: int) -> TileConfig | None:
        """The TileConfig for candidate `index`; None for IREE's default."""
        return config_of_row(self.kernel.roles, self.candidates[index])


def legal(kernel: Kernel, c: np.ndarray, isa: HostISA | None = None) -> np.ndarray:
    """Which candidates IREE can compile: vector tiles divide distribution tiles, the register
    block fits in the vector registers, and no vector op reaches IREE's limit for the host's
    ISA (32 KiB on AVX-512, 16 KiB on AVX2: "One or more operations with large vector sizes")."""
    isa = isa or host_isa()
    dm, dn, vm, vn, vk = c.T
    return ((dm % vm == 0) & (dn % vn == 0) & (vm * vn <= isa.lanes_f32 * isa.vector_registers)
            & (vk <= kernel.k) & (dm <= kernel.m) & (dn <= kernel.n)
            & (vm * vn * vk * kernel.element_bytes < isa.max_vector_op_bytes))


def tile_space(kernel: Kernel, dist_choices=(8, 16, 32, 64, 128, 256),
               vec_m=(1, 2, 4, 8, 16), vec_n=(8, 16, 32, 64), vec_k=(1, 2, 4, 8, 16),
               isa: HostISA | None = None) -> TileSpace:
    isa = isa or host_isa()
    lanes = isa.lanes_f32
    dms, dns = _sizes(kernel.m, dist_choices), _sizes(kernel.n, dist_choices)
    # Register and unroll tiles stay small: a whole extent there only bloats code.
    vms, vns = _sizes(kernel.m, vec_m, False), _sizes(kernel.n, vec_n, False)
    vks = _sizes(kernel.k, vec_k, False)
    if kernel.b_transposed and kernel.k >= lanes:
        # B contiguous along k: IREE's CPU codegen is only fast when a reduction step covers a
        # whole vector (measured: vk < 16 ran 1.3x to 4x slower on every such kernel of the suite).
        vks = vks[vks % lanes == 0]
    grid = np.stack(np.meshgrid(dms, dns, vms, vns, vks, indexing="ij"), -1).reshape(-1, 5)
    grid = grid[legal(kernel, grid, isa)]
    default = np.zeros((1, 5), dtype=np.int64)
    return TileSpace(kernel, np.concatenate([default, grid]))
