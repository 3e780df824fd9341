"""AMD Instinct GPUs through IREE's HIP backend. Numbers: `cost/gpu.py` (AMD's
Instinct MI300X datasheet, dense)."""

from __future__ import annotations

from ..cost import gpu
from .base import KEEP_F64, Target, gpu_program_desc
from .gpu import GpuCodegen


def gfx942() -> Target:
    return Target(name="rocm:gfx942", about="AMD CDNA3 (MI300X), HIP",
                  flags=("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942", KEEP_F64),
                  driver="hip", desc=gpu_program_desc(gpu.GFX942), codegen=GpuCodegen(gpu.GFX942))


TARGETS = {"rocm:gfx942": gfx942}
