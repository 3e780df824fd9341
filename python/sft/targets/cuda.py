"""NVIDIA GPUs through IREE's CUDA backend (compiled here, run where a GPU and its driver are).

Hardware numbers: `cost/gpu.py` (NVIDIA's datasheets: A100 SXM 40GB, H200 SXM; dense).
IREE 3.13's CUDA target table has no sm_90 (`--iree-cuda-target=sm_90` is "missing GPU target"):
Hopper is named by a `#hal.device.target` on the module instead, IREE's sm_89 description with
arch sm_90, PTX 8.0 and Hopper's 227 KiB of shared memory per block. Its PTX says `.target sm_90`
and uses `mma.sync` (IREE 3.13 has no WGMMA intrinsic).

f64 is demoted to f32 here (IREE's default, which the other targets turn off): IREE 3.13's CUDA
codegen fails on f64 reductions ("failed to distribute", e.g. the f64 mean torch-mlir's
LayerNorm decomposition computes), so a program's f64 runs in f32 on CUDA, as PyTorch's own
CUDA LayerNorm computes it.
"""

from __future__ import annotations

from ..cost import gpu
from .base import Target, gpu_program_desc
from .gpu import GpuCodegen


_SM90_MMA = ", ".join(f"<{m}>" for m in (
    "NV_MMA_SYNC_F32_16x8x16_F16", "NV_MMA_SYNC_F16_16x8x16_F16", "NV_MMA_SYNC_F32_16x8x16_BF16",
    "NV_MMA_SYNC_F32_16x8x32_F8E4M3FN", "NV_MMA_SYNC_F32_16x8x32_F8E5M2",
    "NV_WMMA_F32_16x16x16_F16", "NV_WMMA_F16_16x16x16_F16"))
SM90_DEVICE = (
    '#hal.device.target<"cuda", [#hal.executable.target<"cuda", "cuda-nvptx-fb", '
    '{iree_codegen.target_info = #iree_gpu.target<arch = "sm_90", features = "+ptx80", '
    "wgp = <compute = fp64|fp32|fp16|int64|int32|int16|int8, storage = b64|b32|b16|b8, "
    f"subgroup = shuffle|arithmetic, dot = dp4xi8toi32, mma = [{_SM90_MMA}], "
    "subgroup_size_choices = [32], max_workgroup_sizes = [1024, 1024, 1024], "
    "max_thread_count_per_workgroup = 1024, max_workgroup_memory_bytes = 232448, "
    "max_workgroup_counts = [2147483647, 65535, 65535]>>}>]> : !hal.device")


def sm80() -> Target:
    return Target(name="cuda:sm_80", about="NVIDIA Ampere (A100), CUDA",
                  flags=("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
                  driver="cuda", desc=gpu_program_desc(gpu.SM80), codegen=GpuCodegen(gpu.SM80))


def sm90() -> Target:
    return Target(name="cuda:sm_90", about="NVIDIA Hopper (H100, H200), CUDA",
                  flags=(), driver="cuda", desc=gpu_program_desc(gpu.SM90), codegen=GpuCodegen(gpu.SM90),
                  device_attr=SM90_DEVICE)


TARGETS = {"cuda:sm_80": sm80, "cuda:sm_90": sm90}
