"""GPUs through Vulkan (SPIR-V). Numbers: below (AMD's Radeon RX 7900 XTX
specifications).

`vulkan:lavapipe` is the device every machine can have: Mesa's lavapipe (`llvmpipe`, a Vulkan
device on the CPU; Debian's `mesa-vulkan-drivers`). Its description is the device's own, read
through the Vulkan loader (`backend/vulkan_info.py`) when this process first builds the target:
subgroup sizes, workgroup limits, shared memory, arithmetic and storage features, integer dot
product, cooperative matrices (none on lavapipe). Where no lavapipe is installed (compiling for
it on another machine) it is what Mesa 22.3.6 reported, recorded below. Compiled for `rdna3`
instead, IREE's code assumes RDNA3's subgroups of 32 or 64 and computes wrong values on lavapipe
(a matmul of width 10: 1.57 off), without an error.

The GPU space and its legality rules serve lavapipe like any GPU (the fuzzer and gpu-check draw
its SPIR-V configs), but the search never chooses among kernel configs from the cost model's
timings there (`Target.model_times=False`): they would be a CPU's, not a GPU's. `search="model"`
keeps IREE's configs and says so; `search="verify"` measures."""

from __future__ import annotations

import os
import re
from functools import lru_cache

from ..backend.vulkan_info import VulkanDevice, query_devices
from ..cost.hardware import GpuDesc
from .base import KEEP_F64, Target, gpu_program_desc
from .gpu import GpuCodegen


# Spec-sheet values, dense (no sparsity), each with its source; those no vendor publishes (L2
# bandwidth, latency, launch cost, mma.sync's share of Hopper's peak) are marked as estimates
# and are what a device run must calibrate.
# AMD Radeon RX 7900 XTX (RDNA 3, gfx1100): AMD's product specifications (96 CUs at 2.5 GHz boost;
# 61.4 TFLOP/s f32 (dual issue), 122.8 f16 (WMMA); f64 at 1/32 of f32; 64 KB LDS per CU;
# 192 KB of VGPRs per SIMD, 2 SIMDs per CU; 96 MB Infinity Cache; 24 GB GDDR6 at 960 GB/s).
RDNA3 = GpuDesc(
    name="rx7900xtx", api="vulkan", arch="rdna3", compute_units=96, subgroup_size=32,
    simds_per_cu=2, clock_hz=2.5e9, simt_f32=61.4e12, simt_f64=61.4e12 / 32,
    mma_flops=(("f16", 122.8e12), ("bf16", 122.8e12)),
    intrinsics=("WMMAR3_F32_16x16x16_F16", "WMMAR3_F16_16x16x16_F16", "WMMAR3_F32_16x16x16_BF16",
                "WMMAR3_BF16_16x16x16_BF16", "WMMAR3_I32_16x16x16_I8"),
    shared_per_cu=64 * 1024, shared_per_workgroup=65536, shared_bytes_per_clk=128,
    registers_per_cu=2 * 192 * 1024 // 4, max_registers_per_thread=256,
    max_threads_per_cu=1024,    # 16 waves of 32 per SIMD
    max_threads_per_workgroup=1024, max_workgroups_per_cu=32, l2_bytes=96 * 2**20,
    dram_bytes=24 * 10**9, dram_bandwidth=960e9,
    l2_bandwidth=3.5e12,        # estimate: AMD quotes up to 3.5x the GDDR6 rate for Infinity Cache
    memory_latency=0.6e-6,      # estimate
    launch_overhead=8e-6,       # estimate: a Vulkan dispatch through IREE's HAL
)


def rdna3() -> Target:
    return Target(name="vulkan:rdna3", about="AMD RDNA3 (RX 7900 XTX), Vulkan/SPIR-V",
                  flags=("--iree-hal-target-device=vulkan", "--iree-vulkan-target=rdna3", KEEP_F64),
                  driver="vulkan", desc=gpu_program_desc(RDNA3), codegen=GpuCodegen(RDNA3))


# Mesa 22.3.6's lavapipe as `vulkaninfo --json` reported it (Debian 12, 2026-12-01).
RECORDED_LAVAPIPE = VulkanDevice(
    index=0, name="llvmpipe (LLVM 15.0.6, 256 bits)", driver="llvmpipe",
    driver_info="Mesa 22.3.6 (LLVM 15.0.6)", device_type="CPU", api_version=(1, 3),
    subgroup_sizes=(8,), subgroup_ops=("basic", "vote", "arithmetic", "ballot", "shuffle",
                                       "shuffle_relative", "quad"),
    max_workgroup_sizes=(1024, 1024, 1024), max_workgroup_invocations=1024,
    max_workgroup_counts=(65535, 65535, 65535), shared_memory_bytes=32768, float64=True,
    float16=True, int64=True, int16=True, int8=True, storage16=True, storage8=True,
    integer_dot_product=True, cooperative_matrix=False)

# The SPIR-V version each Vulkan version guarantees.
_SPIRV = {(1, 0): "1.0", (1, 1): "1.3", (1, 2): "1.5", (1, 3): "1.6"}


@lru_cache(maxsize=1)
def lavapipe_device() -> tuple[VulkanDevice, bool]:
    """lavapipe's description and whether it was read from the device here (else recorded)."""
    found = [d for d in query_devices() if d.driver == "llvmpipe"]
    return (found[0], True) if found else (RECORDED_LAVAPIPE, False)


def device_attr(dev: VulkanDevice) -> str:
    """The #hal.device.target for the device: IREE's #iree_gpu.target spelled from its report."""
    compute = [name for name, has in (("fp64", dev.float64), ("fp32", True), ("fp16", dev.float16),
                                      ("int64", dev.int64), ("int32", True), ("int16", dev.int16),
                                      ("int8", dev.int8)) if has]
    storage = ["b64", "b32"] + ["b16"] * dev.storage16 + ["b8"] * dev.storage8
    subgroup = [op for op in ("shuffle", "arithmetic") if op in dev.subgroup_ops] or ["none"]
    spirv = _SPIRV.get(dev.api_version, "1.6" if dev.api_version > (1, 3) else "1.0")
    ints = lambda xs: "[" + ", ".join(str(x) for x in xs) + "]"  # noqa: E731
    return ('#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
            f'{{iree_codegen.target_info = #iree_gpu.target<arch = "{dev.driver}", '
            f'features = "spirv:v{spirv},cap:Shader", wgp = <compute = {"|".join(compute)}, '
            f'storage = {"|".join(storage)}, subgroup = {"|".join(subgroup)}, '
            f'dot = {"dp4xi8toi32" if dev.integer_dot_product else "none"}, mma = [], '
            f"subgroup_size_choices = {ints(dev.subgroup_sizes)}, "
            f"max_workgroup_sizes = {ints(dev.max_workgroup_sizes)}, "
            f"max_thread_count_per_workgroup = {dev.max_workgroup_invocations}, "
            f"max_workgroup_memory_bytes = {dev.shared_memory_bytes}, "
            f"max_workgroup_counts = {ints(dev.max_workgroup_counts)}>>}}>]> : !hal.device")


def lavapipe_desc(dev: VulkanDevice) -> GpuDesc:
    """The device's limits as a GpuDesc. lavapipe runs workgroups on one thread per CPU core with
    LLVM vectors of the width its name states; the rates are rough (the program-level terms
    need numbers, and no config is chosen from them here)."""
    cores = os.cpu_count() or 1
    width = re.search(r"(\d+) bits", dev.name)
    lanes = int(width.group(1)) // 32 if width else 4
    return GpuDesc(
        name=dev.driver, api="vulkan", arch=dev.driver, compute_units=cores,
        subgroup_size=dev.subgroup_sizes[-1], simds_per_cu=1, clock_hz=3.0e9,
        simt_f32=cores * 3.0e9 * 2 * lanes, simt_f64=cores * 3.0e9 * lanes, mma_flops=(), intrinsics=(),
        shared_per_cu=dev.shared_memory_bytes, shared_per_workgroup=dev.shared_memory_bytes,
        shared_bytes_per_clk=64, registers_per_cu=64 * 1024, max_registers_per_thread=128,
        max_threads_per_cu=dev.max_workgroup_invocations,
        max_threads_per_workgroup=dev.max_workgroup_invocations, max_workgroups_per_cu=1,
        l2_bytes=2 ** 20, dram_bytes=8 * 2 ** 30, dram_bandwidth=20e9, l2_bandwidth=100e9,
        memory_latency=0.1e-6, launch_overhead=30e-6)


def lavapipe() -> Target:
    dev, queried = lavapipe_device()
    desc = lavapipe_desc(dev)
    source = "read from the device" if queried else "as Mesa 22.3.6 reported it (no lavapipe here)"
    return Target(name="vulkan:lavapipe",
                  about=f"Mesa lavapipe, a Vulkan device on the CPU ({dev.driver_info}; {source}), SPIR-V",
                  flags=(KEEP_F64,), driver="vulkan", desc=gpu_program_desc(desc),
                  codegen=GpuCodegen(desc), device_attr=device_attr(dev), model_times=False)


TARGETS = {"vulkan:rdna3": rdna3, "vulkan:lavapipe": lavapipe}
