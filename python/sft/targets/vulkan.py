"""GPUs through Vulkan (SPIR-V). Numbers: `cost/gpu.py` (AMD's Radeon RX
7900 XTX specifications)."""

from __future__ import annotations

from ..cost import gpu
from .base import KEEP_F64, Target, gpu_program_desc
from .gpu import GpuCodegen


def rdna3() -> Target:
    return Target(name="vulkan:rdna3", about="AMD RDNA3 (RX 7900 XTX), Vulkan/SPIR-V",
                  flags=("--iree-hal-target-device=vulkan", "--iree-vulkan-target=rdna3", KEEP_F64),
                  driver="vulkan", desc=gpu_program_desc(gpu.RDNA3), codegen=GpuCodegen(gpu.RDNA3))


TARGETS = {"vulkan:rdna3": rdna3}
