"""A hardware description as data: what the cost model's program-level terms (overheads,
bandwidths, FLOP rates, parallelism) need to know about a target, and, for a CPU, the constants
of its kernel model (`CpuModelParams`). Each target's own numbers live with the target
(`sft/targets/`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CpuModelParams:
    """The machine constants of the CPU kernel model (`cost/model.py: predict`), per core, in
    cycles and vector registers. The model's structure comes from the vector ISA (lanes,
    registers: `TargetDesc.simd_f32`, `vector_registers`) and from how IREE 3.13 and LLVM lower
    a register block (read in their assembly); these numbers come from the machine: `for_isa`
    gives defaults from the vector width alone, `sft-calibrate` fits those named in `FITTED`.

    A cycle lasts `TargetDesc.cycle_seconds`: the FLOP rate over what the FMA ports issue."""

    fma_per_cycle: float = 2.0       # vector FMAs issued per cycle (the FLOP rate's unit)
    loads_per_cycle: float = 2.0     # vector loads and broadcasts issued per cycle
    shuffles_per_cycle: float = 1.0  # vector shuffles issued per cycle
    # Share of a shuffle that takes an FMA slot: 1 where shuffles issue on an FMA port
    # (512-bit vectors on Intel: port 5), 0 where they have a port of their own.
    shuffle_fma_share: float = 0.0
    # How well the FMA, load and shuffle ports work at once: a k costs its busiest port's cycles
    # plus (1 - this) of the other ports' (1: perfect overlap, the busiest port alone).
    issue_overlap: float = 0.5
    # Cycles from one FMA to the next on the same accumulator: every accumulator is updated
    # once per k, so a block of few accumulators waits on this rather than on the ports.
    fma_latency: float = 4.0
    # Shuffles per B vector per k when B is contiguous along k (its vn x vk tiles transposed in
    # registers): this many times log2(lanes) stages for a tile of at most one vector each way
    # ... and `irregular_transpose` times as many for any other tile (LLVM's generic shuffle
    # lowering: 2.6x to 3x the shuffles in the assembly, on AVX2 and AVX-512; a fact of the
    # code generator, not of the machine, so not fitted).
    transpose_cost: float = 1.0
    irregular_transpose: float = 3.0
    # Memory operations for each vector register a block needs beyond the architectural ones:
    # per k for spilled accumulators, per reduction step for a transpose's spilled rows
    # (LLVM's spills: 3 to 5 per register per k in the assembly, about 10 per step).
    spill_ops: float = 6.0
    # A distribution tile that does not divide its extent leaves a partial workgroup, and IREE
    # then compiles every workgroup's loops for dynamic sizes: each FMA comes with this many
    # more vector ops (blends and permutes in the assembly), and a blend on the accumulator's
    # chain adds a cycle to its latency.
    partial_tile_ops: float = 3.0
    step_cycles: float = 0.5         # loop overhead per unrolled reduction step of a block
    l2_bytes_per_cycle: float = 32.0  # panels read again from L2 into L1
    # How much of the shorter of compute and memory time hides under the longer (1: all of it).
    overlap: float = 0.5
    # Cycles per access of a line that L1 lost to its own operand's other rows: a register
    # block's rows whose stride is a multiple of L1's set span (k = 1024 or 2048 floats) share
    # one set, and more rows than ways evict each other at every k. Measured on Zen 4 (8 ways):
    # 128x256x1024 with a 16-row block 1469 against 627-650 us at k = 256, 512 or 1040 (20
    # cycles per k for 16 broadcasts of A); B contiguous along k, 16 rows, about 3 cycles a line.
    conflict_cycles: float = 1.25
    # Cycles per line of a segment read down an operand's columns (a plain B, an A stored
    # [K, M]) that L1 lost to the walk's other rows before the next block reads it again
    # (`model.walk_conflict_cycles`): 2 to 6 a line on a Zen 3 core, strides of 1 to 8 KiB;
    # `sft-calibrate` fits it on its plain-B kernel (6.7 on that core).
    walk_conflict_cycles: float = 4.0

    # What `sft-calibrate` fits, with `TargetDesc.peak_flops_f32` and `workgroup_overhead`. The
    # issue rates stay as the ISA says: they set the model's shape, the fit its scale.
    FITTED = ("issue_overlap", "fma_latency", "transpose_cost", "spill_ops", "partial_tile_ops",
              "step_cycles", "l2_bytes_per_cycle", "overlap", "walk_conflict_cycles")

    @staticmethod
    def for_isa(vector_bytes: int) -> "CpuModelParams":
        """Defaults from the vector width: 512-bit shuffles share an FMA port (Intel's port 5)
        and L2 feeds a 64-byte line per cycle; narrower vectors shuffle on a port of their own
        and L2 is assumed to feed half a line."""
        wide = vector_bytes >= 64
        return CpuModelParams(shuffle_fma_share=1.0 if wide else 0.0,
                              l2_bytes_per_cycle=64.0 if wide else 32.0)


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
    l2_bandwidth: float          # bytes/s per core (streamed: what a copy measures)
    dram_bandwidth: float        # bytes/s, whole chip
    dispatch_overhead: float     # seconds per dispatch the parallel executor splits (`Profile.split_count`)
    workgroup_overhead: float    # seconds per workgroup (tile) scheduled
    invoke_overhead: float = 0.0          # seconds per call: waking the parallel executor
    # CPU only: running a call inline on the caller's thread (IREE's local-sync driver) pays no
    # executor wake-up, and a smaller per-dispatch cost, but uses one core.
    serial_invoke_overhead: float = 0.0
    serial_dispatch_overhead: float = 0.0
    parallel_efficiency: float = 1.0      # speed-up per extra core actually obtained (0..1)
    # CPU: one core's FLOP rate on independent FMAs as `sft-calibrate` measured it (0: not
    # measured). The limit rooflines are drawn against; `peak_flops_f32` is the kernel model's
    # fitted scale, which need not be a rate the core reaches (a 2-core Zen 4 VM: fitted 285
    # GFLOP/s, where its double-pumped AVX-512 issues 32 FLOP a cycle and measured 116).
    fma_peak_f32: float = 0.0
    # CPU: the FLOP/s one core reaches on a contraction under data tiling (and with IREE's
    # micro-kernels too), as `sft-calibrate` measured them on a 256^3 matmul and on a thin one
    # (K = 8), the packs and unpacks left out (the search prices them apart). A rate, not a
    # speed-up over IREE's default code: the packed kernels' rate varies little with the shape
    # where the default's does (a 2-core Zen 3, one thread: 256^3 57 GFLOP/s by default, 67
    # packed; 1024^3 18 and 68). 0: not measured, such a contraction is priced as IREE's default
    # code, and the thin rate unmeasured, the square's for every shape
    # (`cost.model.data_tiled_seconds`).
    data_tiling_rate: float = 0.0
    data_tiling_ukernel_rate: float = 0.0
    data_tiling_thin_rate: float = 0.0
    data_tiling_ukernel_thin_rate: float = 0.0
    # CPU: how much faster a matmul runs with its weight held packed (`passes.hold_packed`, the
    # packs of its input and result included) than held [K, N] at IREE's code; `sft-calibrate`
    # measures it (1.0: not measured, and nothing is packed by the model)
    packed_speedup: float = 1.0
    # CPU: the kernel model's constants (ISA defaults unless fitted by `sft-calibrate`).
    cpu: CpuModelParams = field(default_factory=CpuModelParams)
    l1_ways: int = 8                      # CPU: L1's associativity (lines per set)
    # CPU: the last-level cache (whole chip) and what one core streams from it (0: not
    # measured, DRAM's rate): a 2 MiB weight copied at 78 GB/s on a 2-core Zen 4 (32 MiB L3),
    # where DRAM's rate is 40
    last_level_bytes: int = 0
    last_level_bandwidth: float = 0.0
    # CPU: what a dispatch that moves a tensor into another layout (a transpose, data tiling's
    # pack) costs per byte, in bytes streamed in order (`sft-calibrate` measures it: 1.7 on a
    # 2-core Zen 4; 3.0 read off one pack on the Xeon host, the default)
    relayout_cost: float = 3.0
    # CPU: what a byte an elementwise op fused into a contraction's dispatch walks across rows
    # (read or written transposed, in the contraction's tile order: a JAX step's weight update
    # fused into its gradient) costs, in bytes streamed in order at L2's rate; `sft-calibrate`
    # measures it (7.7 on a 2-core Zen 4 VM); 3.0, the default, was read off one SGD-momentum
    # update on one Zen 4 core (636 us transposed, 391 in order)
    transposed_cost: float = 3.0
    # CPU: what each op of such an update's body costs a point on top of its bytes, in seconds
    # (`Dispatch.transposed_work`): walked across rows, its ops run a lane at a time; AdamW's
    # 15 (three divisions, a square root) against SGD-momentum's 4. `sft-calibrate` measures it
    # with both updates; 0, the default, prices the bytes alone
    transposed_op_seconds: float = 0.0
    # CPU: what a byte an op fused into a contraction's dispatch binds beyond the kernel's
    # operands and result costs read in order (an optimizer's update fused into its weight
    # gradient), in bytes streamed at L2's rate (`model.fused_seconds`); `sft-calibrate`
    # measures it (3.6 to 7.8 on a 2-core Zen 3 VM); 0, the default: streamed at the rate of
    # where the dispatch's buffers live (about what a Zen 4 core measured)
    fused_cost: float = 0.0

    @property
    def cycle_seconds(self) -> float:
        """Seconds per cycle of one core as the CPU kernel model counts them."""
        return 2.0 * self.cpu.fma_per_cycle * self.simd_f32 / self.peak_flops_f32

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_dict(data: dict) -> "TargetDesc":
        """The description `asdict` / `to_json` wrote (its `cpu` record included)."""
        data = dict(data)
        cpu = data.pop("cpu", None)
        return TargetDesc(**data, cpu=CpuModelParams(**cpu) if cpu is not None else CpuModelParams())


@dataclass(frozen=True)
class GpuDesc:
    name: str
    api: str                          # "cuda" | "hip" | "vulkan"
    arch: str                         # as IREE names it
    compute_units: int                # SMs or CUs
    subgroup_size: int                # the one IREE prefers (warp / wave)
    simds_per_cu: int                 # schedulers per SM/CU (issue slots to keep busy)
    clock_hz: float                   # the clock the peaks below are quoted at
    simt_f32: float                   # FLOP/s, whole chip, plain FMA
    simt_f64: float
    mma_flops: tuple[tuple[str, float], ...]  # (input dtype, FLOP/s whole chip), dense
    intrinsics: tuple[str, ...]       # the `mma = [...]` list of IREE's #iree_gpu.target
    shared_per_cu: int                # bytes of shared memory / LDS per SM/CU
    shared_per_workgroup: int         # IREE's max_workgroup_memory_bytes
    shared_bytes_per_clk: int         # shared memory bandwidth per SM/CU
    registers_per_cu: int             # 32-bit registers per SM/CU
    max_registers_per_thread: int
    max_threads_per_cu: int
    max_threads_per_workgroup: int
    max_workgroups_per_cu: int
    l2_bytes: int                     # last-level cache
    dram_bytes: int
    dram_bandwidth: float             # bytes/s
    l2_bandwidth: float               # bytes/s, whole chip (estimate: not published)
    memory_latency: float             # seconds, a DRAM load (estimate)
    launch_overhead: float            # seconds per dispatch (estimate)
    mma_efficiency: float = 1.0       # share of the MMA peak IREE's intrinsics can reach
    # what loading one operand fragment costs a subgroup, in issues of one MMA (0: free; read
    # off measured configs where a GPU was lent: `cost/gpu.py`)
    fragment_load_cost: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def mma_peak(self, dtype: str) -> float:
        return dict(self.mma_flops).get(dtype, 0.0)
