"""NVIDIA GPUs through IREE's CUDA backend (compiled here, run where a GPU and its driver are).

Hardware numbers: below (NVIDIA's datasheets: A100 SXM 40GB, H200 SXM; dense).
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

from ..cost.hardware import GpuDesc
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


# Spec-sheet values, dense (no sparsity), each with its source; those no vendor publishes (L2
# bandwidth, latency, launch cost, mma.sync's share of Hopper's peak) are marked as estimates
# and are what a device run must calibrate.
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
    # (measured on the lent H200, 2026-12-04: IREE's best bf16 4096^3 config 121 TFLOP/s, 12%)
    mma_efficiency=0.65,
    # measured there: 2x16 intrinsics per subgroup 1.47 ms, 4x8 1.14, 8x4 1.18 (18 and 12
    # fragment loads per 32 MMAs): a load issues about as long as an MMA
    fragment_load_cost=1.0,
)


def sm80() -> Target:
    return Target(name="cuda:sm_80", about="NVIDIA Ampere (A100), CUDA",
                  flags=("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
                  driver="cuda", desc=gpu_program_desc(SM80), codegen=GpuCodegen(SM80))


def sm90() -> Target:
    return Target(name="cuda:sm_90", about="NVIDIA Hopper (H100, H200), CUDA",
                  flags=(), driver="cuda", desc=gpu_program_desc(SM90), codegen=GpuCodegen(SM90),
                  device_attr=SM90_DEVICE)


TARGETS = {"cuda:sm_80": sm80, "cuda:sm_90": sm90}
