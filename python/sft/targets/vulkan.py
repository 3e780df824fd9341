"""GPUs through Vulkan (SPIR-V). Numbers from AMD's Radeon RX 7900 XTX specifications."""

from __future__ import annotations

from ..cost.hardware import TargetDesc
from ..cost import gpu
from .gpu import GpuCodegen
from .base import KEEP_F64, Target

RDNA3 = TargetDesc(  # RX 7900 XTX: 96 CUs, 61.4 TFLOP/s f32, 960 GB/s GDDR6
    name="vulkan-rdna3", cores=96, simd_f32=32, vector_registers=256,
    peak_flops_f32=61.4e12 / 96, l1_bytes=64 * 1024, l2_bytes=6 * 1024 * 1024,
    l1_bandwidth=128 * 2.5e9, l2_bandwidth=3.5e12 / 96, dram_bandwidth=960e9,
    dispatch_overhead=8e-6, workgroup_overhead=0.05e-6,
)


def rdna3() -> Target:
    return Target(name="vulkan:rdna3", about="AMD RDNA3 (RX 7900 XTX), Vulkan/SPIR-V",
                  flags=("--iree-hal-target-device=vulkan", "--iree-vulkan-target=rdna3", KEEP_F64),
                  driver="vulkan", desc=RDNA3, codegen=GpuCodegen(gpu.RDNA3))


TARGETS = {"vulkan:rdna3": rdna3}
