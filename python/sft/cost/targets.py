"""Hardware descriptions as data: what the cost model needs to know about a target.

The host's vector ISA is read from the machine (`host.py`), its other numbers are defaults
that `sft-calibrate` replaces with measurements; the GPU entries come from vendor
spec sheets (NVIDIA A100 and H100 datasheets, AMD Instinct MI300X datasheet, AMD Radeon RX 7900
XTX specifications), dense peak without sparsity.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from ..paths import cache_dir
from .host import host_isa


@dataclass(frozen=True)
class TargetDesc:
    name: str
    backend: str                 # the backend.TARGETS key that compiles for it
    cores: int                   # CPU cores, or SMs / CUs
    simd_f32: int                # f32 lanes per vector register (CPU) or per warp/wave (GPU)
    vector_registers: int        # architectural vector registers per core (CPU)
    peak_flops_f32: float        # FLOP/s per core, f32 (GPU: with tensor cores where they apply)
    l1_bytes: int                # per core (GPU: shared memory per SM/CU)
    l2_bytes: int                # per core (GPU: whole chip)
    l1_bandwidth: float          # bytes/s per core
    l2_bandwidth: float          # bytes/s per core
    dram_bandwidth: float        # bytes/s, whole chip
    dispatch_overhead: float     # seconds per dispatch
    workgroup_overhead: float    # seconds per workgroup (tile) scheduled
    invoke_overhead: float = 0.0          # seconds per call: waking the parallel executor
    # CPU only: running a call inline on the caller's thread (IREE's local-sync driver) pays no
    # executor wake-up, and a smaller per-dispatch cost, but uses one core.
    serial_invoke_overhead: float = 0.0
    serial_dispatch_overhead: float = 0.0
    parallel_efficiency: float = 1.0      # speed-up per extra core actually obtained (0..1)
    # Shuffles per element-vector per stage when a register tile is transposed (CPU).
    transpose_cost: float = 1.0
    # How much of the shorter of compute and memory time hides under the longer (1: all of it).
    overlap: float = 1.0
    # Contraction speed relative to IREE's default codegen under backend options (measured by
    # `sft-calibrate` on the host; 1.0 where unknown).
    data_tiling_speedup: float = 1.0
    ukernel_speedup: float = 1.0
    data_tiling_ukernel_speedup: float = 1.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_ISA = host_isa()
HOST = TargetDesc(  # vector width and registers read from the machine; the rest calibrated
    name=f"host-{_ISA.name}", backend="host", cores=os.cpu_count() or 1, simd_f32=_ISA.lanes_f32,
    vector_registers=_ISA.vector_registers,
    peak_flops_f32=7.5e9 * _ISA.lanes_f32, l1_bytes=32 * 1024, l2_bytes=1024 * 1024,
    l1_bandwidth=200e9, l2_bandwidth=100e9, dram_bandwidth=20e9,
    dispatch_overhead=4e-6, workgroup_overhead=0.6e-6, invoke_overhead=45e-6,
    serial_invoke_overhead=2e-6, serial_dispatch_overhead=1e-6, parallel_efficiency=0.5, overlap=0.5,
)

SM80 = TargetDesc(  # NVIDIA A100 SXM 40GB: 108 SMs, 19.5 TF32... f32 FMA 19.5 TFLOP/s, 1555 GB/s
    name="cuda-sm80", backend="cuda", cores=108, simd_f32=32, vector_registers=255,
    peak_flops_f32=19.5e12 / 108, l1_bytes=164 * 1024, l2_bytes=40 * 1024 * 1024,
    l1_bandwidth=128 * 1.41e9, l2_bandwidth=5.1e12 / 108, dram_bandwidth=1555e9,
    dispatch_overhead=5e-6, workgroup_overhead=0.05e-6,
)

SM90 = TargetDesc(  # NVIDIA H100 SXM: 132 SMs, 67 TFLOP/s f32, 3.35 TB/s HBM3
    name="cuda-sm90", backend="cuda", cores=132, simd_f32=32, vector_registers=255,
    peak_flops_f32=67e12 / 132, l1_bytes=228 * 1024, l2_bytes=50 * 1024 * 1024,
    l1_bandwidth=128 * 1.98e9, l2_bandwidth=7e12 / 132, dram_bandwidth=3350e9,
    dispatch_overhead=5e-6, workgroup_overhead=0.05e-6,
)

GFX942 = TargetDesc(  # AMD Instinct MI300X: 304 CUs, 163.4 TFLOP/s f32 (matrix), 5.3 TB/s
    name="hip-gfx942", backend="hip", cores=304, simd_f32=64, vector_registers=512,
    peak_flops_f32=163.4e12 / 304, l1_bytes=64 * 1024, l2_bytes=256 * 1024 * 1024,
    l1_bandwidth=128 * 2.1e9, l2_bandwidth=17e12 / 304, dram_bandwidth=5300e9,
    dispatch_overhead=6e-6, workgroup_overhead=0.05e-6,
)

RDNA3 = TargetDesc(  # AMD Radeon RX 7900 XTX: 96 CUs, 61.4 TFLOP/s f32, 960 GB/s
    name="vulkan-rdna3", backend="vulkan", cores=96, simd_f32=32, vector_registers=256,
    peak_flops_f32=61.4e12 / 96, l1_bytes=64 * 1024, l2_bytes=6 * 1024 * 1024,
    l1_bandwidth=128 * 2.5e9, l2_bandwidth=3.5e12 / 96, dram_bandwidth=960e9,
    dispatch_overhead=8e-6, workgroup_overhead=0.05e-6,
)

DESCRIPTIONS = {t.backend if t.backend != "cuda" else t.name: t for t in (HOST, SM80, GFX942, RDNA3)}
DESCRIPTIONS["cuda-sm90"] = SM90


def calibration_file() -> Path:
    return cache_dir() / "host-calibration.json"


def describe(target: str) -> TargetDesc:
    """The description for a target name; the host's numbers are overridden by those that
    `sft-calibrate` measured, if any."""
    if target == "host":
        try:
            return dataclasses.replace(HOST, **json.loads(calibration_file().read_text()))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as err:  # unreadable, not UTF-8, not JSON
            warnings.warn(f"{calibration_file()}: ignored, not a valid calibration ({err})")
    key = "cuda-sm80" if target == "cuda" else target
    return DESCRIPTIONS[key]
