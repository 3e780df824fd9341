"""The tile space of a contraction kernel on IREE's CPU pipeline, and its legality rules.

A candidate is (dm, dn, vm, vn, vk): distribution tiles on m and n (one workgroup computes a
dm x dn block), vector tiles vm x vn (the register block) and the reduction step vk. Candidates
live in numpy arrays so that millions are generated and scored at once. Index 0 of every space
is IREE's own choice (no compilation_info), which the search always keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan import TileConfig
from .kernels import Kernel

FIELDS = ("dm", "dn", "vm", "vn", "vk")
MAX_VECTOR_BYTES = 32768
LANES = 16  # f32 lanes of the host's vectors (AVX-512)


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
        if index == 0:
            return None
        dm, dn, vm, vn, vk = (int(x) for x in self.candidates[index])
        dist, par, red = [], [], []
        for role in self.kernel.roles:
            dist.append({"m": dm, "n": dn, "b": 1}.get(role, 0))
            par.append({"m": vm, "n": vn, "b": 1}.get(role, 0))
            red.append(vk if role == "k" else 0)
        return TileConfig(tuple(dist), tuple(par), tuple(red))


def legal(kernel: Kernel, c: np.ndarray) -> np.ndarray:
    """Which candidates IREE can compile: vector tiles divide distribution tiles, the register
    block fits in the vector registers, and no vector op exceeds IREE's 32 KiB limit
    ("One or more operations with large vector sizes")."""
    dm, dn, vm, vn, vk = c.T
    return ((dm % vm == 0) & (dn % vn == 0) & (vm * vn <= 16 * 32) & (vk <= kernel.k)
            & (dm <= kernel.m) & (dn <= kernel.n)
            & (vm * vn * vk * kernel.element_bytes < MAX_VECTOR_BYTES))


def tile_space(kernel: Kernel, dist_choices=(8, 16, 32, 64, 128, 256),
               vec_m=(1, 2, 4, 8, 16), vec_n=(8, 16, 32, 64), vec_k=(1, 2, 4, 8, 16)) -> TileSpace:
    dms, dns = _sizes(kernel.m, dist_choices), _sizes(kernel.n, dist_choices)
    # Register and unroll tiles stay small: a whole extent there only bloats code.
    vms, vns = _sizes(kernel.m, vec_m, False), _sizes(kernel.n, vec_n, False)
    vks = _sizes(kernel.k, vec_k, False)
    if kernel.b_transposed and kernel.k >= LANES:
        # B contiguous along k: IREE's CPU codegen is only fast when a reduction step covers a
        # whole vector (measured: vk < 16 ran 1.3x to 4x slower on every such kernel of the suite).
        vks = vks[vks % LANES == 0]
    grid = np.stack(np.meshgrid(dms, dns, vms, vns, vks, indexing="ij"), -1).reshape(-1, 5)
    grid = grid[legal(kernel, grid)]
    default = np.zeros((1, 5), dtype=np.int64)
    return TileSpace(kernel, np.concatenate([default, grid]))
