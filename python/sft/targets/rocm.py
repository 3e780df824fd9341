"""AMD Instinct GPUs through IREE's HIP backend. Numbers: below (AMD's
Instinct MI300X datasheet, dense)."""

from __future__ import annotations

from ..cost.hardware import GpuDesc
from .base import KEEP_F64, Target, gpu_program_desc
from .gpu import GpuCodegen


# Spec-sheet values, dense (no sparsity), each with its source; those no vendor publishes (L2
# bandwidth, latency, launch cost, mma.sync's share of Hopper's peak) are marked as estimates
# and are what a device run must calibrate.
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


def gfx942() -> Target:
    return Target(name="rocm:gfx942", about="AMD CDNA3 (MI300X), HIP",
                  flags=("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942", KEEP_F64),
                  driver="hip", desc=gpu_program_desc(GFX942), codegen=GpuCodegen(GFX942))


TARGETS = {"rocm:gfx942": gfx942}
