"""A hardware description as data: what the cost model's program-level terms (overheads,
bandwidths, FLOP rates, parallelism) need to know about a target. Each target's own numbers
live with the target (`sft/targets/`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TargetDesc:
    name: str
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
