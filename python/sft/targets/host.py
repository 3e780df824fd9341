"""`host`: this machine's CPU through IREE's llvm-cpu backend.

Its description is read from the machine: the vector ISA IREE generates code for (`cost/host.py`;
`SFT_HOST_CPU` names another LLVM CPU model), the cores this process may use and the cache sizes
(sysfs). Overheads, bandwidths and FLOP rate start from conservative defaults that
`sft-calibrate` replaces with this machine's measurements (stored in the cache directory).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path

from ..cost.hardware import TargetDesc
from ..cost.host import host_cores, host_isa, read_caches
from ..paths import cache_dir
from ..space.options import SERIAL_DRIVER, cpu_option_space
from .base import KEEP_F64, Target
from .cpu import CpuCodegen


def cpu_model() -> str:
    """The LLVM CPU model IREE generates code for: this machine's unless SFT_HOST_CPU names
    another (e.g. `haswell` to run AVX2 code on an AVX-512 machine, as the tests of both
    forms do)."""
    return os.environ.get("SFT_HOST_CPU", "host")


def detected_description() -> TargetDesc:
    """The host as read from the machine, before any calibration."""
    isa, caches = host_isa(), read_caches()
    return TargetDesc(
        name=f"host-{isa.name}", cores=host_cores(), simd_f32=isa.lanes_f32,
        vector_registers=isa.vector_registers, peak_flops_f32=7.5e9 * isa.lanes_f32,
        l1_bytes=caches.l1_bytes, l2_bytes=caches.l2_bytes,
        l1_bandwidth=200e9, l2_bandwidth=100e9, dram_bandwidth=20e9,
        dispatch_overhead=4e-6, workgroup_overhead=0.6e-6, invoke_overhead=45e-6,
        serial_invoke_overhead=2e-6, serial_dispatch_overhead=1e-6, parallel_efficiency=0.5,
        overlap=0.5)


def calibration_file() -> Path:
    return cache_dir() / "host-calibration.json"


def calibrated_description() -> TargetDesc:
    """The detected description with `sft-calibrate`'s measured numbers on top, if any."""
    desc = detected_description()
    try:
        return dataclasses.replace(desc, **json.loads(calibration_file().read_text()))
    except FileNotFoundError:
        return desc
    except (OSError, ValueError, TypeError) as err:  # unreadable, not UTF-8, not JSON, bad keys
        warnings.warn(f"{calibration_file()}: ignored, not a valid calibration ({err})")
        return desc


def host() -> Target:
    cpu = cpu_model()
    return Target(
        name="host", about=f"this machine's CPU ({host_isa().name}, llvm-cpu, CPU model {cpu})",
        flags=("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
               f"--iree-llvmcpu-target-cpu={cpu}", KEEP_F64),
        driver="local-task", desc=calibrated_description(), codegen=CpuCodegen(host_isa()),
        options=tuple(cpu_option_space()), kernel_driver=SERIAL_DRIVER)


TARGETS = {"host": host}
