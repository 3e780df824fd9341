"""NVIDIA GPUs through IREE's CUDA backend (compiled here, run where a GPU and its driver are).

Hardware numbers from NVIDIA's datasheets (A100 SXM 40GB; H100 SXM), dense, without sparsity.
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

from ..cost.hardware import TargetDesc
from ..cost import gpu
from .gpu import GpuCodegen
from .base import Target

SM80 = TargetDesc(  # A100 SXM 40GB: 108 SMs, 19.5 TFLOP/s f32 FMA, 1555 GB/s HBM2
    name="cuda-sm80", cores=108, simd_f32=32, vector_registers=255,
    peak_flops_f32=19.5e12 / 108, l1_bytes=164 * 1024, l2_bytes=40 * 1024 * 1024,
    l1_bandwidth=128 * 1.41e9, l2_bandwidth=5.1e12 / 108, dram_bandwidth=1555e9,
    dispatch_overhead=5e-6, workgroup_overhead=0.05e-6,
)

SM90 = TargetDesc(  # H100 SXM: 132 SMs, 67 TFLOP/s f32, 3.35 TB/s HBM3 (H200: 4.8 TB/s HBM3e)
    name="cuda-sm90", cores=132, simd_f32=32, vector_registers=255,
    peak_flops_f32=67e12 / 132, l1_bytes=228 * 1024, l2_bytes=50 * 1024 * 1024,
    l1_bandwidth=128 * 1.98e9, l2_bandwidth=7e12 / 132, dram_bandwidth=3350e9,
    dispatch_overhead=5e-6, workgroup_overhead=0.05e-6,
)

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
                  driver="cuda", desc=SM80, codegen=GpuCodegen(gpu.SM80))


def sm90() -> Target:
    return Target(name="cuda:sm_90", about="NVIDIA Hopper (H100, H200), CUDA",
                  flags=(), driver="cuda", desc=SM90, codegen=GpuCodegen(gpu.SM90), device_attr=SM90_DEVICE)


TARGETS = {"cuda:sm_80": sm80, "cuda:sm_90": sm90}
