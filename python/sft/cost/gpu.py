"""The analytical cost model of a contraction's GPU configs.

`predict` scores every candidate row of a GpuSpace at once (numpy, no Python loop per row):
the MMA peak for the kernel's input type (SIMT's for its result type), capped by how fast one
CU's shared memory feeds its tiles, times how busy the CUs are (resident subgroups, from
occupancy: workgroup memory, registers and threads per workgroup), over the waves of
workgroups (quantisation); against the traffic the tiles imply (L2 to the CUs: A once per
column of workgroups, B once per row; DRAM: each operand once unless L2 cannot hold B across
the rows a wave covers), a latency per reduction step that prefetching hides, and the launch.

A GPU's numbers (`cost.hardware.GpuDesc`) live in its target module (targets/cuda.py,
rocm.py, vulkan.py).
"""

from __future__ import annotations

import numpy as np

from ..decisions.gpu_tiles import kernel_types, row_of_iree
from ..space.gpu import derived, shared_bytes
from ..space.kernels import Kernel
from .hardware import GpuDesc


def _registers(kernel: Kernel, c: np.ndarray, d: dict) -> np.ndarray:
    """32-bit registers per thread: the accumulator tile spread over the threads (in the
    result's type), the operand fragments of one step (double-buffered, in the inputs' type),
    and ~32 for addresses and indices."""
    words, in_words = kernel.element_bytes / 4.0, kernel.operand_bytes / 4.0
    wg_m, wg_n, sub_m, sub_n, sg = (c[:, i].astype(np.float64) for i in (2, 3, 5, 6, 7))
    threads = np.maximum(d["threads"], 1)
    acc = wg_m * wg_n / threads * max(words, 0.5)
    fragments = np.where(d["uses_mma"], (sub_m + sub_n) * d["mma_k"] / np.maximum(sg, 1),
                         sub_m + sub_n) * 2.0 * in_words
    return acc + fragments + 32.0


def _occupancy(kernel: Kernel, c: np.ndarray, d: dict, gpu: GpuDesc, regs: np.ndarray) -> np.ndarray:
    threads = np.maximum(d["threads"], 1).astype(np.float64)
    smem = shared_bytes(kernel, c).astype(np.float64)
    by_smem = np.where(smem > 0, np.floor(gpu.shared_per_cu / np.maximum(smem, 1.0)), np.inf)
    by_regs = np.floor(gpu.registers_per_cu / (np.minimum(regs, gpu.max_registers_per_thread) * threads))
    by_threads = np.floor(gpu.max_threads_per_cu / threads)
    return np.maximum(1.0, np.minimum.reduce(
        [np.full_like(threads, gpu.max_workgroups_per_cu), by_smem, by_regs, by_threads]))


def occupancy(kernel: Kernel, candidates: np.ndarray, gpu: GpuDesc) -> np.ndarray:
    """Workgroups of each row that fit on one CU at once (shared memory, registers, threads and
    the hardware's workgroup limit; at least 1)."""
    c = np.asarray(candidates, dtype=np.int64)
    d = derived(c)
    return _occupancy(kernel, c, d, gpu, _registers(kernel, c, d)).astype(np.int64)


def predict(kernel: Kernel, candidates: np.ndarray, gpu: GpuDesc,
            default_row: np.ndarray | None = None) -> np.ndarray:
    """Predicted seconds per candidate row; an all-zero row (IREE's default) is scored as
    `default_row` (the fallback config when None)."""
    c = np.array(candidates, dtype=np.int64, copy=True)
    zero = np.all(c == 0, axis=1)
    if zero.any():
        c[zero] = row_of_iree(kernel, None) if default_row is None else default_row
    d = derived(c)
    f = c.astype(np.float64)
    wg_m, wg_n, k_step, sub_m, sub_n, stages = f[:, 2], f[:, 3], f[:, 4], f[:, 5], f[:, 6], f[:, 8]
    m, n, k, b = float(kernel.m), float(kernel.n), float(kernel.k), float(kernel.batch)
    # Inputs (A, B) in their own type, the result (C) and its accumulators in the result's.
    in_b, out_b = float(kernel.operand_bytes), float(kernel.element_bytes)
    cus = float(gpu.compute_units)
    result_type, input_type = kernel_types(kernel)

    # Peak per CU for the path the row takes (an intrinsic's by its input type; SIMT's by the
    # type it computes in, the result's), capped by what shared memory feeds its tiles: a
    # sub_m x sub_n tile reads (sub_m + sub_n) input elements per k for 2 sub_m sub_n FLOPs.
    mma_peak = gpu.mma_peak(input_type) * gpu.mma_efficiency
    simt_peak = gpu.simt_f64 if result_type == "f64" else gpu.simt_f32
    use_mma = d["uses_mma"] & (c[:, 1] > 0) & (mma_peak > 0)
    per_cu = np.where(use_mma, mma_peak, simt_peak) / cus
    feed = gpu.shared_bytes_per_clk * gpu.clock_hz * 2.0 * sub_m * sub_n / ((sub_m + sub_n) * in_b)
    per_cu = np.minimum(per_cu, feed)
    # A subgroup's intrinsics also wait on its fragment loads: per reduction step a tile of
    # tm x tn intrinsics loads tm A and tn B fragments for tm tn MMAs, each costing the GPU's
    # `fragment_load_cost` MMA issues. On an H200 (bf16 4096^3, IREE's mma.sync code) 2x16
    # intrinsics per subgroup took 1.47 ms, 4x8 1.14 and 8x4 1.18: 18 loads for 32 MMAs against
    # 12, which shared memory's bytes alone do not tell apart.
    tiles_m = sub_m / np.maximum(d["mma_m"], 1)
    tiles_n = sub_n / np.maximum(d["mma_n"], 1)
    loads = (tiles_m + tiles_n) / np.maximum(tiles_m * tiles_n, 1.0)
    per_cu = np.where(use_mma, per_cu / (1.0 + gpu.fragment_load_cost * loads), per_cu)

    threads = np.maximum(d["threads"], 1).astype(np.float64)
    regs = _registers(kernel, c, d)
    resident_max = _occupancy(kernel, c, d, gpu, regs)
    workgroups = b * np.ceil(m / wg_m) * np.ceil(n / wg_n)
    resident = np.minimum(resident_max, np.ceil(workgroups / cus))
    waves = np.ceil(workgroups / (cus * resident))
    # A CU issues at its peak with two subgroups per scheduler to hide latency; registers beyond
    # the per-thread limit spill.
    subgroups = resident * np.maximum(1.0, threads / gpu.subgroup_size)
    busy = np.minimum(1.0, subgroups / (2.0 * gpu.simds_per_cu))
    spill = np.where(regs > gpu.max_registers_per_thread, (regs / gpu.max_registers_per_thread) ** 2, 1.0)
    rate = per_cu * busy / spill

    # One reduction step of the resident workgroups, or the load latency it waits for (hidden
    # by `stages` steps in flight).
    steps = np.ceil(k / k_step)
    step_flops = resident * 2.0 * wg_m * wg_n * k_step
    step = np.maximum(step_flops / rate, gpu.memory_latency / np.maximum(stages, 1.0))
    compute = waves * steps * step

    # Traffic: every workgroup reads its A panel (wg_m x K) and B panel (K x wg_n) through L2.
    a_bytes, b_bytes, c_bytes = b * m * k * in_b, b * k * n * in_b, b * m * n * out_b
    rows, cols = np.ceil(m / wg_m), np.ceil(n / wg_n)
    from_l2 = a_bytes * cols + b_bytes * rows + c_bytes
    # DRAM: once each, unless B does not stay in L2 while the waves walk the rows of workgroups
    # (workgroups run n-fastest: a wave covers concurrent // cols rows).
    rows_per_wave = np.maximum(1.0, np.floor(cus * resident / cols))
    b_reads = np.where(b_bytes / b <= gpu.l2_bytes / 2, 1.0, np.ceil(rows / rows_per_wave))
    fits = a_bytes + b_bytes + c_bytes <= gpu.l2_bytes
    from_dram = np.where(fits, a_bytes + b_bytes + c_bytes, a_bytes + b_bytes * b_reads + c_bytes)
    # Bandwidth needs CUs asking for it: assume half of them saturate DRAM and L2.
    share = np.minimum(1.0, 2.0 * np.minimum(workgroups, cus) / cus)
    memory = np.maximum(from_l2 / gpu.l2_bandwidth, from_dram / gpu.dram_bandwidth) / share
    return np.maximum(compute, memory) + gpu.launch_overhead
