"""AMD Instinct GPUs through IREE's HIP backend. Numbers from AMD's Instinct MI300X datasheet,
dense, without sparsity."""

from __future__ import annotations

from ..cost.hardware import TargetDesc
from ..cost import gpu
from .gpu import GpuCodegen
from .base import KEEP_F64, Target

GFX942 = TargetDesc(  # MI300X: 304 CUs, 163.4 TFLOP/s f32 (matrix), 5.3 TB/s HBM3
    name="hip-gfx942", cores=304, simd_f32=64, vector_registers=512,
    peak_flops_f32=163.4e12 / 304, l1_bytes=64 * 1024, l2_bytes=256 * 1024 * 1024,
    l1_bandwidth=128 * 2.1e9, l2_bandwidth=17e12 / 304, dram_bandwidth=5300e9,
    dispatch_overhead=6e-6, workgroup_overhead=0.05e-6,
)


def gfx942() -> Target:
    return Target(name="rocm:gfx942", about="AMD CDNA3 (MI300X), HIP",
                  flags=("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942", KEEP_F64),
                  driver="hip", desc=GFX942, codegen=GpuCodegen(gpu.GFX942))


TARGETS = {"rocm:gfx942": gfx942}
