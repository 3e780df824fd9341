"""GPU hardware descriptions and the analytical cost model of a contraction's GPU configs.

`predict` scores every candidate row of a GpuSpace at once (numpy, no Python loop per row):
the MMA peak for the kernel's input type (SIMT's for its result type), capped by how fast one
CU's shared memory feeds its tiles, times how busy the CUs are (resident subgroups, from
occupancy: workgroup memory, registers and threads per workgroup), over the waves of
workgroups (quantisation); against
the traffic the tiles imply (L2 to the CUs: A once per column of workgroups, B once per row;
DRAM: each operand once unless L2 cannot hold B across the rows a wave covers), a latency per
reduction step that prefetching hides, and the launch.

Numbers are spec-sheet values, dense (no sparsity), each with its source; those no vendor
publishes (L2 bandwidth, latency, launch cost, mma.sync's share of Hopper's peak) are marked as
estimates and are what a device run must calibrate.
"""

from __future__ import annotations

import numpy as np

from ..space.gpu import (COOP_MATRIX, FIELDS, INTRINSICS, MMA_SHAPES, SPIRV_SIMT, TF_MMA, TF_SIMT,
                         VECTOR_DISTRIBUTE, derived, intrinsic, kernel_types, shared_bytes)
from ..space.kernels import Kernel
from .hardware import GpuDesc


_SM80_MMA = ("NV_MMA_SYNC_F32_16x8x16_F16", "NV_MMA_SYNC_F16_16x8x16_F16",
             "NV_MMA_SYNC_F32_16x8x16_BF16", "NV_WMMA_F32_16x16x16_F16", "NV_WMMA_F16_16x16x16_F16")
_SM89_MMA = ("NV_MMA_SYNC_F32_16x8x16_F16", "NV_MMA_SYNC_F16_16x8x16_F16",
             "NV_MMA_SYNC_F32_16x8x16_BF16", "NV_MMA_SYNC_F32_16x8x32_F8E4M3FN",
             "NV_MMA_SYNC_F32_16x8x32_F8E5M2", "NV_WMMA_F32_16x16x16_F16", "NV_WMMA_F16_16x16x16_F16")

# NVIDIA A100 SXM4 40GB: A100 datasheet and "NVIDIA A100 Tensor Core GPU Architecture"
# whitepaper (108 SMs at 1410 MHz boost; 19.5 TFLOP/s f32, 9.7 f64, 312 f16/bf16 tensor dense;
# 164 KB shared per SM, 163 KB per block; 64K registers, 2048 threads, 32 blocks per SM;
# 40 MB L2; 1555 GB/s HBM2).
SM80 = GpuDesc(
    name="a100-sxm4-40gb", api="cuda", arch="sm_80", compute_units=108, subgroup_size=32,
    simds_per_cu=4, clock_hz=1.41e9, simt_f32=19.5e12, simt_f64=9.7e12,
    mma_flops=(("f16", 312e12), ("bf16", 312e12)), intrinsics=_SM80_MMA,
    shared_per_cu=164 * 1024, shared_per_workgroup=166912, shared_bytes_per_clk=128,
    registers_per_cu=65536, max_registers_per_thread=255, max_threads_per_cu=2048,
    max_threads_per_workgroup=1024, max_workgroups_per_cu=32, l2_bytes=40 * 2**20,
    dram_bytes=40 * 10**9, dram_bandwidth=1555e9,
    l2_bandwidth=5.1e12,        # estimate: microbenchmarks of A100 measure about 5 TB/s
    memory_latency=0.45e-6,     # estimate: ~600 cycles
    launch_overhead=5e-6,       # estimate: one IREE dispatch on a CUDA stream
)

# NVIDIA H200 SXM (the lent machine; an H100 SXM differs only in HBM: 80 GB at 3.35 TB/s): H100/H200
# datasheets and the Hopper whitepaper (132 SMs; 989.4 TFLOP/s f16/bf16 tensor dense at the
# 1.83 GHz boost they are quoted at, 1979 f8; 67 f32, 34 f64; 228 KB shared per SM, 227 KB per
# block = IREE's 232448; 50 MB L2; 141 GB HBM3e at 4.8 TB/s). IREE 3.13 has no WGMMA: its
# intrinsics are sm_89's mma.sync list.
SM90 = GpuDesc(
    name="h200-sxm", api="cuda", arch="sm_90", compute_units=132, subgroup_size=32,
    simds_per_cu=4, clock_hz=1.83e9, simt_f32=67e12, simt_f64=34e12,
    mma_flops=(("f16", 989.4e12), ("bf16", 989.4e12), ("f8", 1978.9e12)), intrinsics=_SM89_MMA,
    shared_per_cu=228 * 1024, shared_per_workgroup=232448, shared_bytes_per_clk=128,
    registers_per_cu=65536, max_registers_per_thread=255, max_threads_per_cu=2048,
    max_threads_per_workgroup=1024, max_workgroups_per_cu=32, l2_bytes=50 * 2**20,
    dram_bytes=141 * 10**9, dram_bandwidth=4.8e12,
    l2_bandwidth=9e12,          # estimate: not published; A100's ~5 TB/s scaled by SMs x clock
    memory_latency=0.45e-6,     # estimate
    launch_overhead=5e-6,       # estimate
    # estimate: mma.sync issue (no WGMMA in IREE 3.13) reaches about 2/3 of Hopper's dense peak
    mma_efficiency=0.65,
)

# AMD Instinct MI300X: AMD's MI300X datasheet and CDNA 3 whitepaper (304 CUs at 2100 MHz; 163.4
# TFLOP/s f32 vector and matrix, 81.7 f64 vector, 163.4 f64 matrix, 1307.4 f16/bf16 dense, 2614.9
# f8/i8; 64 KB LDS per CU; 512 VGPRs x 64 lanes x 4 SIMDs per CU; 256 MB Infinity Cache as last
# level; 192 GB HBM3 at 5.3 TB/s).
GFX942 = GpuDesc(
    name="mi300x", api="hip", arch="gfx942", compute_units=304, subgroup_size=64,
    simds_per_cu=4, clock_hz=2.1e9, simt_f32=163.4e12, simt_f64=81.7e12,
    mma_flops=(("f16", 1307.4e12), ("bf16", 1307.4e12), ("f32", 163.4e12), ("f64", 163.4e12),
               ("f8", 2614.9e12), ("i8", 2614.9e12)),
    intrinsics=("MFMA_F32_16x16x16_BF16", "MFMA_F32_32x32x8_BF16", "MFMA_F32_16x16x32_F8E5M2FNUZ",
                "MFMA_F32_16x16x32_F8E5M2FNUZ_F8E4M3FNUZ", "MFMA_F32_16x16x32_F8E4M3FNUZ",
                "MFMA_F32_16x16x32_F8E4M3FNUZ_F8E5M2FNUZ", "MFMA_F32_32x32x16_F8E5M2FNUZ",
                "MFMA_F32_32x32x16_F8E5M2FNUZ_F8E4M3FNUZ", "MFMA_F32_32x32x16_F8E4M3FNUZ",
                "MFMA_F32_32x32x16_F8E4M3FNUZ_F8E5M2FNUZ", "MFMA_I32_16x16x32_I8",
                "MFMA_I32_32x32x16_I8", "MFMA_F64_16x16x4_F64", "MFMA_F32_16x16x4_F32",
                "MFMA_F32_16x16x16_F16", "MFMA_F32_32x32x8_F16", "MFMA_F32_4x4x4x16B_F16",
                "MFMA_F32_16x16x4x4B_F16", "MFMA_F32_32x32x4x2B_F16", "MFMA_F32_4x4x4x16B_BF16",
                "MFMA_F32_16x16x4x4B_BF16", "MFMA_F32_32x32x4x2B_BF16", "MFMA_F32_4x4x1x16B_F32",
                "MFMA_F32_16x16x1x4B_F32", "MFMA_F32_32x32x1x2B_F32", "MFMA_F64_4x4x4x4B_F64",
                "MFMA_I32_4x4x4x16B_I8", "MFMA_I32_16x16x4x4B_I8", "MFMA_I32_32x32x4x2B_I8"),
    shared_per_cu=64 * 1024, shared_per_workgroup=65536, shared_bytes_per_clk=128,
    registers_per_cu=512 * 64 * 4, max_registers_per_thread=512, max_threads_per_cu=2048,
    max_threads_per_workgroup=1024,
    max_workgroups_per_cu=32,   # estimate: bounded in practice by the 32 waves per CU
    l2_bytes=256 * 2**20, dram_bytes=192 * 10**9, dram_bandwidth=5.3e12,
    l2_bandwidth=17.2e12,       # AMD's Infinity Cache peak
    memory_latency=0.7e-6,      # estimate
    launch_overhead=6e-6,       # estimate
)

# AMD Radeon RX 7900 XTX (RDNA 3, gfx1100): AMD's product specifications (96 CUs at 2.5 GHz boost;
# 61.4 TFLOP/s f32 (dual issue), 122.8 f16 (WMMA); f64 at 1/32 of f32; 64 KB LDS per CU;
# 192 KB of VGPRs per SIMD, 2 SIMDs per CU; 96 MB Infinity Cache; 24 GB GDDR6 at 960 GB/s).
RDNA3 = GpuDesc(
    name="rx7900xtx", api="vulkan", arch="rdna3", compute_units=96, subgroup_size=32,
    simds_per_cu=2, clock_hz=2.5e9, simt_f32=61.4e12, simt_f64=61.4e12 / 32,
    mma_flops=(("f16", 122.8e12), ("bf16", 122.8e12)),
    intrinsics=("WMMAR3_F32_16x16x16_F16", "WMMAR3_F16_16x16x16_F16", "WMMAR3_F32_16x16x16_BF16",
                "WMMAR3_BF16_16x16x16_BF16", "WMMAR3_I32_16x16x16_I8"),
    shared_per_cu=64 * 1024, shared_per_workgroup=65536, shared_bytes_per_clk=128,
    registers_per_cu=2 * 192 * 1024 // 4, max_registers_per_thread=256,
    max_threads_per_cu=1024,    # 16 waves of 32 per SIMD
    max_threads_per_workgroup=1024, max_workgroups_per_cu=32, l2_bytes=96 * 2**20,
    dram_bytes=24 * 10**9, dram_bandwidth=960e9,
    l2_bandwidth=3.5e12,        # estimate: AMD quotes up to 3.5x the GDDR6 rate for Infinity Cache
    memory_latency=0.6e-6,      # estimate
    launch_overhead=8e-6,       # estimate: a Vulkan dispatch through IREE's HAL
)

# What IREE picks for a contraction when its config cannot be read: the SIMT config it gives an
# f32 matmul on CUDA (workgroup 32x128, a 1x16 tile per thread, k steps of 32).
FALLBACK = dict(pipeline=TF_SIMT, mma=0, wg_m=32, wg_n=128, k=32, sub_m=1, sub_n=16, subgroup=32,
                stages=0, promote=0)


def _row(**values) -> np.ndarray:
    return np.array([values.get(f, 0) for f in FIELDS], dtype=np.int64)


def _at(values, roles, role, default=0) -> int:
    """The entry of a per-loop list for the (first) loop of `role`."""
    if not isinstance(values, (list, tuple)) or len(values) != len(roles) or role not in roles:
        return default
    value = values[roles.index(role)]
    return value if type(value) is int else default


def default_row(kernel: Kernel, fields: dict | None) -> np.ndarray:
    """IREE's own config as a candidate row, from the GPU fields the profile recorded for the
    kernel's dispatch (`Dispatch.gpu`: pipeline, workgroup_size, subgroup_size, prefetch or
    pipeline depth, lowering_config); FALLBACK, clipped to the extents, when unknown."""
    roles, m, n, k = kernel.roles, kernel.m, kernel.n, kernel.k
    fallback = _row(**{**FALLBACK, "wg_m": min(32, m), "wg_n": min(128, n), "k": min(32, k),
                       "sub_n": min(16, n)})
    if not isinstance(fields, dict) or not isinstance(fields.get("lowering_config"), dict):
        return fallback
    lc, pipeline = fields["lowering_config"], fields.get("pipeline")

    def number(key, default):
        return fields[key] if type(fields.get(key)) is int else default
    sg = number("subgroup_size", 0)
    size = fields.get("workgroup_size")
    size = size if isinstance(size, list) and all(type(x) is int for x in size) else [1, 1, 1]
    mma_name = lc.get("mma_kind", "")
    mma = INTRINSICS.index(mma_name) + 1 if mma_name in INTRINSICS else 0
    mma_m, mma_n, mma_k = (int(x) for x in MMA_SHAPES[mma])
    wg_m, wg_n = _at(lc.get("workgroup"), roles, "m"), _at(lc.get("workgroup"), roles, "n")
    promote = int(bool(lc.get("promote_operands")))
    stages = number("prefetch_num_stages", 0)
    if pipeline == "TileAndFuse" and mma:
        sub = lc.get("subgroup")
        row = _row(pipeline=TF_MMA, mma=mma, wg_m=wg_m, wg_n=wg_n,
                   k=_at(lc.get("reduction"), roles, "k") * mma_k, sub_m=_at(sub, roles, "m") * mma_m,
                   sub_n=_at(sub, roles, "n") * mma_n, subgroup=sg, stages=stages, promote=promote)
    elif pipeline == "TileAndFuse":
        th = lc.get("thread")
        row = _row(pipeline=TF_SIMT, wg_m=wg_m, wg_n=wg_n, k=_at(lc.get("reduction"), roles, "k"),
                   sub_m=_at(th, roles, "m"), sub_n=_at(th, roles, "n"), subgroup=sg,
                   stages=stages, promote=promote)
    elif pipeline == "VectorDistribute" and mma:
        basis = lc.get("subgroup_basis") or [[]]
        counts = basis[0] if isinstance(basis, (list, tuple)) and basis else []
        cnt_m, cnt_n = max(_at(counts, roles, "m", 1), 1), max(_at(counts, roles, "n", 1), 1)
        row = _row(pipeline=VECTOR_DISTRIBUTE, mma=mma, wg_m=wg_m, wg_n=wg_n,
                   k=_at(lc.get("reduction"), roles, "k"), sub_m=wg_m // cnt_m, sub_n=wg_n // cnt_n,
                   subgroup=sg, stages=stages, promote=promote)
    elif pipeline in ("CooperativeMatrixVectorize", "MatmulPromoteVectorize"):
        levels = list(lc.get("tile_sizes") or [])
        padded = [list(level) + [0] * (len(roles) - len(level)) for level in levels]
        top = padded[0] if padded else []
        wg_m, wg_n = _at(top, roles, "m"), _at(top, roles, "n")
        depth = number("pipeline_depth", 1)
        if pipeline == "CooperativeMatrixVectorize" and len(padded) >= 4:
            native = ("WMMA", *kernel_types(kernel), _at(padded[3], roles, "m"),
                      _at(padded[3], roles, "n"), _at(padded[3], roles, "k"))
            mma = next((i + 1 for i, name in enumerate(INTRINSICS) if _coop_shape(name) == native), 0)
            row = _row(pipeline=COOP_MATRIX, mma=mma, wg_m=wg_m, wg_n=wg_n,
                       k=_at(padded[2], roles, "k"), sub_m=_at(padded[1], roles, "m"),
                       sub_n=_at(padded[1], roles, "n"), subgroup=sg, stages=depth, promote=1)
        else:
            x, y = (list(size) + [1, 1])[:2]
            row = _row(pipeline=SPIRV_SIMT, wg_m=wg_m, wg_n=wg_n, k=_at(top, roles, "k"),
                       sub_m=wg_m // max(y, 1), sub_n=wg_n // max(x, 1), stages=depth, promote=1)
    else:
        return fallback
    # A row whose tiles do not read back (a form this parser does not know) scores as the fallback.
    return row if min(row[2], row[3], row[4], row[5], row[6]) > 0 else fallback


_iree_default_row = default_row  # `predict`'s argument of that name hides it there


def _coop_shape(name: str):
    """(family prefix, accumulator type, input type, m, n, k) of a WMMA intrinsic."""
    parsed = intrinsic(name)
    if parsed is None:
        return None
    return (parsed[0][:4], parsed[1], parsed[5], *parsed[2:5])


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
        c[zero] = _iree_default_row(kernel, None) if default_row is None else default_row
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
