"""Kernel code generation on IREE's GPU pipelines: the config space of `space/gpu.py` (TileAndFuse
and VectorDistribute on CUDA and ROCm, the SPIR-V pipelines on Vulkan) for one GPU's limits and
intrinsics, ranked by the model of `cost/gpu.py`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..cost.gpu import predict
from ..cost.hardware import GpuDesc, TargetDesc
from ..decisions.gpu_tiles import row_of_iree
from ..space.gpu import GpuSpace, gpu_space
from ..space.kernels import INPUT_BYTES, Kernel


@dataclass(frozen=True)
class GpuCodegen:
    gpu: GpuDesc

    def space(self, kernel: Kernel) -> GpuSpace:
        return gpu_space(kernel, self.gpu)

    def default(self, kernel: Kernel, dispatch) -> tuple:
        return tuple(int(x) for x in row_of_iree(kernel, getattr(dispatch, "gpu", None)))

    def predict(self, kernel: Kernel, candidates: np.ndarray, desc: TargetDesc, cores: int,
                default: tuple) -> np.ndarray:
        # A GPU runs every workgroup of a kernel on its own CUs: `cores` (the CPU's serial
        # option) does not apply.
        return predict(kernel, candidates, self.gpu, np.array(default, dtype=np.int64))

    def low_precision(self, kernel: Kernel, dtype: str) -> Kernel | None:
        """The kernel with `dtype` inputs accumulating in its f32 result: its space offers the
        intrinsics that take `dtype` and accumulate in f32 (and SIMT), its model reads the
        inputs at 2 bytes and keeps the accumulators and the result at 4."""
        if kernel.element_bytes != 4 or kernel.input_type or dtype not in INPUT_BYTES:
            return None
        return replace(kernel, input_type=dtype)
