"""A Vulkan device's own description, as the Vulkan loader reports it through Vulkan-Tools'
`vulkaninfo --json` (the Vulkan Profiles schema): the limits, features and extensions that IREE's
SPIR-V code generation depends on. IREE's Python runtime names a Vulkan device but does not
expose its properties, so the query goes through the tool Debian ships beside the driver
(`vulkan-tools`, which tools/install-lavapipe installs with it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .process import run_group

QUERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VulkanDevice:
    """What one physical device reports (the names are Vulkan's, shortened)."""

    index: int                          # vulkaninfo's GPU number
    name: str                           # deviceName
    driver: str                         # driverName ("llvmpipe" for lavapipe)
    driver_info: str                    # driverInfo ("Mesa 22.3.6 (LLVM 15.0.6)")
    device_type: str                    # "CPU", "DISCRETE_GPU", ...
    api_version: tuple[int, int]        # the Vulkan version it implements (major, minor)
    subgroup_sizes: tuple[int, ...]     # min..max subgroup size, powers of two
    subgroup_ops: tuple[str, ...]       # "basic", "arithmetic", "shuffle", ... (supportedOperations)
    max_workgroup_sizes: tuple[int, ...]
    max_workgroup_invocations: int
    max_workgroup_counts: tuple[int, ...]
    shared_memory_bytes: int            # maxComputeSharedMemorySize
    float64: bool
    float16: bool
    int64: bool
    int16: bool
    int8: bool
    storage16: bool                     # storageBuffer16BitAccess
    storage8: bool                      # storageBuffer8BitAccess
    integer_dot_product: bool           # shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product)
    cooperative_matrix: bool            # VK_KHR_ or VK_NV_cooperative_matrix


def _device(index: int, profile: dict) -> VulkanDevice:
    caps = profile["capabilities"]["device"]
    props, feats = caps["properties"], caps["features"]
    base = props["VkPhysicalDeviceProperties"]
    limits = base["limits"]
    subgroup = props.get("VkPhysicalDeviceSubgroupProperties", {})
    control = props.get("VkPhysicalDeviceSubgroupSizeControlProperties", {})
    driver = props.get("VkPhysicalDeviceDriverProperties", {})
    core = feats.get("VkPhysicalDeviceFeatures", {})
    f16i8 = feats.get("VkPhysicalDeviceShaderFloat16Int8Features", {})
    s16 = feats.get("VkPhysicalDevice16BitStorageFeatures", {})
    s8 = feats.get("VkPhysicalDevice8BitStorageFeatures", {})
    dot = feats.get("VkPhysicalDeviceShaderIntegerDotProductFeatures", {})
    size = int(subgroup.get("subgroupSize", 0))
    low, high = int(control.get("minSubgroupSize", size)), int(control.get("maxSubgroupSize", size))
    sizes = tuple(s for s in (4, 8, 16, 32, 64, 128) if low <= s <= high) or (size,)
    ops = tuple(re.sub(r"^VK_SUBGROUP_FEATURE_(\w+)_BIT$", r"\1", op).lower()
                for op in subgroup.get("supportedOperations", ()))
    extensions = caps.get("extensions", {})
    version = int(base.get("apiVersion", 0))  # VK_MAKE_API_VERSION: major in bits 22-28, minor 12-21
    return VulkanDevice(
        index=index, name=str(base.get("deviceName", "")), driver=str(driver.get("driverName", "")),
        driver_info=str(driver.get("driverInfo", "")),
        device_type=str(base.get("deviceType", "")).removeprefix("VK_PHYSICAL_DEVICE_TYPE_"),
        api_version=(version >> 22 & 0x7F, version >> 12 & 0x3FF),
        subgroup_sizes=sizes, subgroup_ops=ops,
        max_workgroup_sizes=tuple(int(x) for x in limits["maxComputeWorkGroupSize"]),
        max_workgroup_invocations=int(limits["maxComputeWorkGroupInvocations"]),
        max_workgroup_counts=tuple(int(x) for x in limits["maxComputeWorkGroupCount"]),
        shared_memory_bytes=int(limits["maxComputeSharedMemorySize"]),
        float64=bool(core.get("shaderFloat64")), float16=bool(f16i8.get("shaderFloat16")),
        int64=bool(core.get("shaderInt64")), int16=bool(core.get("shaderInt16")),
        int8=bool(f16i8.get("shaderInt8")), storage16=bool(s16.get("storageBuffer16BitAccess")),
        storage8=bool(s8.get("storageBuffer8BitAccess")),
        integer_dot_product=bool(dot.get("shaderIntegerDotProduct")),
        cooperative_matrix=any(e in extensions for e in ("VK_KHR_cooperative_matrix",
                                                         "VK_NV_cooperative_matrix")))


def query_devices(timeout: float = QUERY_TIMEOUT_S) -> list[VulkanDevice]:
    """Every Vulkan device the loader finds; [] where vulkaninfo is missing, fails or finds none
    (the caller says what that means for it)."""
    tool = shutil.which("vulkaninfo")
    if tool is None:
        return []
    try:
        summary = run_group([tool, "--summary"], timeout)
    except subprocess.TimeoutExpired:
        return []
    devices = []
    for index in sorted({int(i) for i in re.findall(r"^GPU(\d+):", summary.stdout, re.M)}):
        with tempfile.TemporaryDirectory() as tmp:  # --json writes its file into the cwd
            try:
                run_group([tool, f"--json={index}"], timeout, cwd=tmp)
            except subprocess.TimeoutExpired:
                continue
            for path in Path(tmp).glob("VP_VULKANINFO_*.json"):
                try:
                    devices.append(_device(index, json.loads(path.read_text())))
                except (KeyError, TypeError, ValueError):
                    pass  # a schema this parser does not know: as if the device were absent
    return devices
