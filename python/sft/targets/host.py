"""`host`: this machine's CPU through IREE's llvm-cpu backend.

Its description is read from the machine: the vector ISA IREE generates code for (`cost/host.py`;
`SFT_HOST_CPU` names another LLVM CPU model), the cores this process may use and the cache sizes
(sysfs). Overheads, bandwidths, FLOP rate and the kernel model's constants start from defaults
derived from the ISA, which `sft-calibrate` replaces with this machine's measurements and fit
(stored in the cache directory, under the identity of the host it measured: another machine, ISA
or CPU model sharing the cache folder does not reuse them).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..cost.hardware import CpuModelParams, TargetDesc
from ..cost.host import cpu_signature, host_cores, host_isa, read_caches
from ..cost.trust import Trust, stored_after
from ..paths import cache_dir, warn_once
from ..space.options import SERIAL_DRIVER, cpu_option_space
from .base import KEEP_F64, Target

# IREE 3.13 hoists constant expressions into initializers; with a PRNG key constant in a JAX
# function (threefry on constants), the hoisted initializer fails at load ("indirect buffer
# reference slot 0 is out range of the declared binding capacity", in copy_buffer), IREE alone
# on JAX's StableHLO too. sft passes weights as arguments, so little is constant to hoist.
NO_CONST_EXPR_HOISTING = "--iree-opt-const-expr-hoisting=false"
from .cpu import UNCALIBRATED_MARGIN, CpuCodegen

CALIBRATION_FORMAT = 3  # 3: the executor's dispatch cost measured on split dispatches
# The FLOP rate before calibration: FMA issue x lanes x 2 at a nominal 3 GHz.
NOMINAL_CLOCK_HZ = 3.0e9


def cpu_model() -> str:
    """The LLVM CPU model IREE generates code for: this machine's unless SFT_HOST_CPU names
    another (e.g. `haswell` to run AVX2 code on an AVX-512 machine, as the tests of both
    forms do)."""
    return os.environ.get("SFT_HOST_CPU", "host")


def detected_description() -> TargetDesc:
    """The host as read from the machine, before any calibration: the kernel model's constants
    from the vector ISA (`CpuModelParams.for_isa`), the rest conservative defaults."""
    isa, caches = host_isa(), read_caches()
    cpu = CpuModelParams.for_isa(isa.vector_bytes)
    return TargetDesc(
        name=f"host-{isa.name}", cores=host_cores(), simd_f32=isa.lanes_f32,
        vector_registers=isa.vector_registers,
        peak_flops_f32=2.0 * cpu.fma_per_cycle * isa.lanes_f32 * NOMINAL_CLOCK_HZ,
        l1_bytes=caches.l1_bytes, l2_bytes=caches.l2_bytes, l1_ways=caches.l1_ways,
        l1_bandwidth=200e9, l2_bandwidth=100e9, dram_bandwidth=20e9,
        last_level_bytes=caches.last_level_bytes,
        # The parallel executor's cost per call (waking its workers, then the caller) and per
        # dispatch: on a 2-core Zen 4 VM 98-155 us a call with the weights held on the device
        # (73-78 as `sft-calibrate` reads it, the lowest of three readings; 180-240 with every
        # operand uploaded each call, as an earlier reading had it), 5-8 us more per split
        # dispatch. The old 45 us sent every small program to the executor, 2.5x slower.
        dispatch_overhead=8e-6, workgroup_overhead=0.05e-6, invoke_overhead=120e-6,
        serial_invoke_overhead=2e-6, serial_dispatch_overhead=1e-6, parallel_efficiency=0.5,
        cpu=cpu)


def calibration_identity() -> dict:
    """What a calibration is valid for: the code IREE generates (ISA, CPU model) and the machine
    the description reads (cores, caches)."""
    desc, isa = detected_description(), host_isa()
    return {"isa": isa.name, "cpu_model": cpu_model(), "cores": desc.cores,
            "l1_bytes": desc.l1_bytes, "l2_bytes": desc.l2_bytes}


def _identity_key(identity: dict) -> str:
    return " ".join(f"{k}={identity[k]}" for k in sorted(identity))


def calibration_file() -> Path:
    """Where `sft-calibrate` stores its calibrations (one per host identity)."""
    return cache_dir() / "host-calibration.json"


def _read_calibrations() -> dict:
    """{identity key: stored calibration} from the file; {} where there is none. Raises
    ValueError (or OSError) where the file is not one sft-calibrate wrote."""
    try:
        data = json.loads(calibration_file().read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT \
            or not isinstance(data.get("hosts"), dict):
        raise ValueError("not in this sft's format: run sft-calibrate again")
    return data["hosts"]


def store_calibration(calibration: dict) -> None:
    """Write a calibration ({"identity", "desc", "cpu", "fit"}) beside those of other hosts
    already in the file (a shared cache folder, another SFT_HOST_CPU)."""
    try:
        hosts = _read_calibrations()
    except (OSError, ValueError):
        hosts = {}  # an unreadable or older file: replaced
    hosts[_identity_key(calibration["identity"])] = calibration
    calibration_file().write_text(json.dumps({"format": CALIBRATION_FORMAT, "hosts": hosts},
                                             indent=2, sort_keys=True))


def store_trust(run: dict) -> dict:
    """Write one run's measured trust factors ({"factors": {kind: factor}, "source": ...},
    `cost/trust.py`) into this host's calibration, each stored factor the worst of the last
    runs' (`stored_after`), kept beside whatever sft-calibrate measured (or alone, where it never
    ran: the model's numbers stay the detected ones). Returns the trust stored."""
    Trust.from_stored(run)  # refuses factors that do not read
    found = this_host_calibration() or {"identity": calibration_identity()}
    trust = stored_after(found.get("trust"), run)
    store_calibration({**found, "trust": trust})
    return trust


# Fields earlier calibrations stored that this sft no longer models: `ukernel_speedup`, IREE's
# micro-kernels without data tiling, which compile to the same executables as its default code
# (they replace only packed contractions, packs and unpacks); data tiling's speed-ups over IREE's
# default code, replaced by its rates (`TargetDesc.data_tiling_rate`).
RETIRED_FIELDS = ("ukernel_speedup", "data_tiling_speedup", "data_tiling_ukernel_speedup",
                  "data_tiling_thin_speedup", "data_tiling_ukernel_thin_speedup")


def apply_calibration(desc: TargetDesc, calibration: dict) -> TargetDesc:
    """`desc` with a stored calibration's measured fields and kernel model parameters."""
    cpu = dataclasses.replace(desc.cpu, **calibration.get("cpu", {}))
    measured = {k: v for k, v in calibration.get("desc", {}).items() if k not in RETIRED_FIELDS}
    return dataclasses.replace(desc, **measured, cpu=cpu)


def this_host_calibration() -> dict | None:
    """The stored calibration of this host's identity, or None. A file that does not read, or
    that holds only other hosts' calibrations, is ignored with one warning."""
    path = calibration_file()
    try:
        hosts = _read_calibrations()
    except (OSError, ValueError) as err:  # unreadable, not JSON, another format
        warn_once(f"calibration:{path}", f"{path}: ignored, not a valid calibration ({err})")
        return None
    key = _identity_key(calibration_identity())
    if hosts and key not in hosts:
        warn_once(f"calibration-identity:{path}",
                  f"{path}: ignored, calibrated for another host or ISA ({'; '.join(sorted(hosts))}), "
                  f"not {key}: run sft-calibrate on this one")
    return hosts.get(key)


def calibrated_description(found: dict | None = None) -> TargetDesc:
    """The detected description with `sft-calibrate`'s numbers for this host on top, if any
    (`found`: this host's calibration, already read)."""
    desc = detected_description()
    found = this_host_calibration() if found is None else found
    if found is None:
        return desc
    try:
        return apply_calibration(desc, found)
    except (TypeError, AttributeError, ValueError) as err:  # fields this sft does not have
        warn_once(f"calibration:{calibration_file()}",
                  f"{calibration_file()}: ignored, not a valid calibration ({err})")
        return desc


def calibration_state() -> str:
    """"calibrated" where this host's calibration is stored, else what the model runs on."""
    found = this_host_calibration() or {}
    return "calibrated" if "desc" in found else "detected defaults (never calibrated)"


def host() -> Target:
    """The host target, with this host's calibration where `sft-calibrate` stored one; where it
    never ran, the detected description, and tile configs must predict a clear gain
    (`UNCALIBRATED_MARGIN`) to replace IREE's own. Its trust factors (`cost/trust.py`) are the
    ones `sft-bench quality --programs --store` measured on this host, else `UNMEASURED`."""
    cpu = cpu_model()
    found = this_host_calibration()
    desc = calibrated_description(found)
    margin = 0.0 if desc != detected_description() else UNCALIBRATED_MARGIN
    try:
        trust = Trust.from_stored((found or {}).get("trust"))
    except (TypeError, AttributeError, ValueError) as err:
        warn_once(f"trust:{calibration_file()}",
                  f"{calibration_file()}: trust factors ignored, not valid ({err})")
        trust = Trust()
    return Target(
        name="host", about=f"this machine's CPU ({host_isa().name}, llvm-cpu, CPU model {cpu})",
        flags=("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
               f"--iree-llvmcpu-target-cpu={cpu}", KEEP_F64, NO_CONST_EXPR_HOISTING),
        expand_f64_math=True, im2col_filter_gradients=True, split_outer_sums=True, split_batches=True,
        pack_weights=True,
        driver="local-task", desc=desc, codegen=CpuCodegen(host_isa(), margin),
        options=tuple(cpu_option_space()), kernel_driver=SERIAL_DRIVER,
        machine=f"cpu {cpu_signature()}" if cpu == "host" else "", trust=trust)


TARGETS = {"host": host}
