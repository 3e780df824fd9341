"""GPUs through Vulkan (SPIR-V). Numbers: `cost/gpu.py` (AMD's Radeon RX 7900 XTX
specifications).

`vulkan:lavapipe` is the device every machine can have: Mesa's lavapipe (`llvmpipe`, a Vulkan
1.3 device on the CPU; Debian's `mesa-vulkan-drivers`). Its description is what `vulkaninfo`
reports for Mesa 22.3: subgroups of 8 only, 1024 invocations per workgroup, 32 KiB of shared
memory, f64/f16/int8/int16/int64 arithmetic and 8/16-bit storage, no cooperative matrix or
integer dot product. Compiled for `rdna3` instead, IREE's code assumes RDNA3's subgroups of 32
or 64 and computes wrong values on lavapipe (a matmul of width 10: 1.57 off), without an
error. IREE's kernel configs are kept there (no GPU tile search: the cost model knows no
software GPU, and its timings are a CPU's)."""

from __future__ import annotations

from ..cost import gpu
from ..cost.hardware import GpuDesc
from .base import KEEP_F64, Target, gpu_program_desc
from .gpu import GpuCodegen


def rdna3() -> Target:
    return Target(name="vulkan:rdna3", about="AMD RDNA3 (RX 7900 XTX), Vulkan/SPIR-V",
                  flags=("--iree-hal-target-device=vulkan", "--iree-vulkan-target=rdna3", KEEP_F64),
                  driver="vulkan", desc=gpu_program_desc(gpu.RDNA3), codegen=GpuCodegen(gpu.RDNA3))


# lavapipe's limits as vulkaninfo reports them; the rates are a 2-core CPU's, rough: the cost
# model's program-level terms need numbers, and nothing is chosen from them on this device
LAVAPIPE = GpuDesc(
    name="lavapipe", api="vulkan", arch="lavapipe", compute_units=2, subgroup_size=8,
    simds_per_cu=1, clock_hz=3.0e9, simt_f32=1.0e11, simt_f64=0.5e11, mma_flops=(), intrinsics=(),
    shared_per_cu=32 * 1024, shared_per_workgroup=32768, shared_bytes_per_clk=64,
    registers_per_cu=64 * 1024, max_registers_per_thread=128, max_threads_per_cu=1024,
    max_threads_per_workgroup=1024, max_workgroups_per_cu=1, l2_bytes=2**20,
    dram_bytes=8 * 2**30, dram_bandwidth=20e9, l2_bandwidth=100e9, memory_latency=0.1e-6,
    launch_overhead=30e-6)

LAVAPIPE_DEVICE = (
    '#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
    '{iree_codegen.target_info = #iree_gpu.target<arch = "lavapipe", features = "spirv:v1.3,cap:Shader", '
    "wgp = <compute = fp64|fp32|fp16|int64|int32|int16|int8, storage = b64|b32|b16|b8, "
    "subgroup = shuffle|arithmetic, dot = none, mma = [], subgroup_size_choices = [8], "
    "max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024, "
    "max_workgroup_memory_bytes = 32768, max_workgroup_counts = [65535, 65535, 65535]>>}>]> : !hal.device")


def lavapipe() -> Target:
    return Target(name="vulkan:lavapipe", about="Mesa lavapipe (a Vulkan device on the CPU), SPIR-V",
                  flags=(KEEP_F64,), driver="vulkan", desc=gpu_program_desc(LAVAPIPE),
                  codegen=None, device_attr=LAVAPIPE_DEVICE)


TARGETS = {"vulkan:rdna3": rdna3, "vulkan:lavapipe": lavapipe}
