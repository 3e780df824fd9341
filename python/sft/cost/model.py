"""The analytical cost model: predicted seconds for tile candidates of a contraction kernel.

Everything is numpy over the candidate array, so scoring costs well under a microsecond per
candidate. Per kernel: compute time at the achievable FLOP rate (cores actually busy given the
workgroup count and wave quantisation, SIMD lanes actually used, register-block reuse), data
traffic from DRAM and from L2 derived from the tile footprints, per-workgroup and per-dispatch
overheads. A plan's time is the sum over its kernels.
"""

from __future__ import annotations

import numpy as np

from ..space.kernels import Kernel
from .targets import TargetDesc

# A stand-in for IREE's own CPU choice, scored as row 0 of every space. It is an assumption, not
# yet read from IREE (`--compile-to=executable-configurations` would tell the real one).
IREE_DEFAULT = (64, 64, 8, 32, 1)


def _ceil_div(a, b):
    return -(-a // b)


def predict(kernel: Kernel, candidates: np.ndarray, target: TargetDesc) -> np.ndarray:
    """Seconds per call for each candidate row (dm, dn, vm, vn, vk); zeros mean IREE's default."""
    c = candidates.astype(np.float64)
    default = np.all(candidates == 0, axis=1)
    if default.any():
        c[default] = np.minimum(np.array(IREE_DEFAULT, dtype=np.float64),
                                [kernel.m, kernel.n, kernel.m, kernel.n, kernel.k])
    dm, dn, vm, vn, vk = c.T
    m, n, k, b = float(kernel.m), float(kernel.n), float(kernel.k), float(kernel.batch)
    nbytes = kernel.element_bytes

    workgroups = b * _ceil_div(m, dm) * _ceil_div(n, dn)
    waves = _ceil_div(workgroups, target.cores)
    busy = workgroups / (waves * target.cores)

    lanes = target.simd_f32
    vectors_n = _ceil_div(vn, lanes)
    lane_use = vn / (vectors_n * lanes)
    # Register block: vm x vectors_n accumulators, plus vk x vectors_n loads of B and the
    # broadcasts of A that one unrolled reduction step keeps live.
    live = vm * vectors_n + vk * vectors_n + vm
    spill = np.where(live > target.vector_registers, live / target.vector_registers, 1.0) ** 2
    # Two FMAs and two loads issue per cycle: a block needs as many FMAs as loads to stay FMA-bound.
    reuse = np.minimum(1.0, (vm * vectors_n) / (vm + vectors_n))
    padded = b * (_ceil_div(m, vm) * vm) * (_ceil_div(n, vn) * vn) * k
    flop_rate = target.peak_flops_f32 * target.cores * busy * lane_use * reuse / spill
    compute = 2.0 * padded / flop_rate

    # Each workgroup streams a dm x K panel of A and a K x dn panel of B from L2 (or DRAM when the
    # panels do not fit) and writes its dm x dn block.
    panel = (dm * k + k * dn) * nbytes
    per_wg = panel + dm * dn * nbytes
    l2_fit = panel <= target.l2_bytes
    from_l2 = workgroups * per_wg / (target.l2_bandwidth * target.cores * busy)
    unique = b * (m * k + k * n + m * n) * nbytes
    from_dram = np.where(l2_fit, unique, workgroups * per_wg) / target.dram_bandwidth
    # The reduction loop is unrolled vk deep: short steps pay loop overhead per register block.
    steps = workgroups * _ceil_div(dm, vm) * _ceil_div(dn, vn) * _ceil_div(k, vk)
    loop = steps * 2.0 / (3e9 * target.cores)

    return (np.maximum(compute, np.maximum(from_l2, from_dram)) + loop
            + waves * target.workgroup_overhead + target.dispatch_overhead)
