"""The analytical cost model: predicted seconds for a program, its dispatches and the tile
candidates of its contraction kernels.

Everything is numpy over the candidate array, so scoring costs well under a microsecond per
candidate. Per kernel (CPU): the cycles of each register block's reduction steps, from the
vector ISA's structure (lanes, registers: what a block issues on the FMA, load and shuffle
ports, the accumulator chain's latency, the registers it spills, the transposes of a B
contiguous along k, masked code for partial tiles) and the machine constants of
`TargetDesc.cpu` (ISA defaults, or fitted by `sft-calibrate`); cores actually busy given the
workgroup count and wave quantisation; data traffic from DRAM and from L2 derived from the tile
footprints; per-workgroup overhead. Per program: the kernels, the other dispatches
(memory-bound: their bytes over the bandwidth of where they live), per-dispatch and per-call
overheads of the driver that runs them.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..backend.profile import Dispatch, Profile
from ..decisions.cpu_tiles import IREE_DEFAULT
from ..space.kernels import Kernel
from ..space.options import ModuleOptions
from .hardware import TargetDesc

# Share of peak assumed for a contraction whose code sft does not model (a convolution, a step
# of a chain that is not matmul-like).
UNTILED_EFFICIENCY = 0.5


def _ceil_div(a, b):
    return np.ceil(np.divide(a, b))  # exact for the integer-valued operands here; faster than //


def rows_per_set(rows, stride_bytes: float, target: TargetDesc, line: int = 64):
    """Lines of `rows` rows, `stride_bytes` apart, that fall in the busiest set of L1: rows whose
    stride is a multiple of the set span (sets x line) all share one."""
    sets = max(int(target.l1_bytes // (max(target.l1_ways, 1) * line)), 1)
    if stride_bytes % line:
        return np.ones_like(rows)  # rows drift across the sets
    step = int(stride_bytes // line) % sets
    spanned = sets // np.gcd(step, sets) if step else 1
    return _ceil_div(rows, spanned)


def conflict_cycles(kernel: Kernel, vm, vn, vk, target: TargetDesc):
    """Cycles per k a register block loses to L1 set conflicts: where more of its operands'
    rows share a set than L1 has ways, every access of them goes to L2 (A: vm broadcasts per k;
    B contiguous along k: a line per row per line's worth of k). A row-major A and a B
    contiguous along k (a linear layer's weight) both step k elements a row: at the same offset
    in buffers aligned alike, their rows fall in the same sets. On a Zen 3 core (8 ways) IREE's
    8x8 block of 128x256xK ran 20 and 18 GFLOP/s at K = 1024 and 2048, 52 at K = 1040: 8 rows of each
    in one set, neither operand past the ways alone."""
    stride = kernel.k * kernel.operand_bytes
    a_rows = rows_per_set(vm, stride, target) if kernel.a_along_k else np.zeros_like(vm)
    b_rows = rows_per_set(vn, stride, target) if kernel.b_transposed else np.zeros_like(vn)
    a_lines = vm if kernel.a_along_k else np.zeros_like(vm)
    b_lines = vn * _ceil_div(vk * kernel.operand_bytes, 64.0) / vk if kernel.b_transposed else np.zeros_like(vn)
    lost = np.where(a_rows + b_rows > target.l1_ways, a_lines + b_lines, 0.0)
    return lost * target.cpu.conflict_cycles


PAGE_BYTES = 4096


def walk_conflict_cycles(kernel: Kernel, vm, vn, target: TargetDesc):
    """Cycles per k a register block loses walking an operand down its columns: a plain B
    [K, N] (a segment of vn a k) or an A stored [K, M] (vm a k). The next block along m (of B)
    or n (of A) reads the same segments again only after the whole walk over K rows; rows a
    multiple of L1's set span apart share its sets, and past its ways every segment comes from
    beyond L1 again: in full where each row lies on a page of its own (no prefetcher crosses
    one), in part where rows share a page. One Zen 3 core, 128xNxK with B [K, N], blocks of 4x16
    and 8x8: N = 1024 (K = 64 to 256) 24-34 GFLOP/s, N = 1040 43-49; N = 512 34-51, N = 528
    47-59; A [128, M] of an Mx256x128 matmul, an 8x8 block: M = 1024 17, M = 1040 51."""
    lost = 0.0
    for operand, segment in ((0, vm), (1, vn)):
        stride = kernel.k_stride(operand) * kernel.operand_bytes
        if kernel.k_stride(operand) > 1 and rows_per_set(kernel.k, stride, target) > target.l1_ways:
            lines = _ceil_div(segment * kernel.operand_bytes, 64.0)
            lost = lost + lines * min(1.0, stride / PAGE_BYTES)
    return lost * target.cpu.walk_conflict_cycles


def parallel_speedup(active, target: TargetDesc):
    """What `active` busy cores give over one, at the target's measured parallel efficiency."""
    return 1.0 + (active - 1.0) * target.parallel_efficiency


def predict(kernel: Kernel, candidates: np.ndarray, target: TargetDesc, cores: int | None = None,
            default: tuple[int, ...] = IREE_DEFAULT) -> np.ndarray:
    """Seconds of work for each candidate row (dm, dn, vm, vn, vk) on `cores` cores (the
    target's by default); an all-zero row is IREE's default, scored as `default`.

    A vm x vn register block costs per k the cycles of its busiest issue port (FMAs, loads:
    broadcasts of A, vectors of B and spill traffic, or shuffles: the register transpose of a B
    contiguous along k) plus what the other ports do not hide, and never less than the FMA
    latency (each accumulator is updated once per k); the constants are `target.cpu`'s."""
    cores = target.cores if cores is None else cores
    p = target.cpu
    c = candidates.astype(np.float64)
    is_default = np.all(candidates == 0, axis=1)
    if is_default.any():
        c[is_default] = np.minimum(np.array(default, dtype=np.float64),
                                   [kernel.m, kernel.n, kernel.m, kernel.n, kernel.k])
    dm, dn, vm, vn, vk = c.T
    m, n, k, b = float(kernel.m), float(kernel.n), float(kernel.k), float(kernel.batch)
    nbytes = kernel.element_bytes
    cycle = target.cycle_seconds

    workgroups = b * _ceil_div(m, dm) * _ceil_div(n, dn)
    waves = _ceil_div(workgroups, cores)
    speedup = parallel_speedup(workgroups / waves, target)

    lanes = target.simd_f32
    vectors_n = _ceil_div(vn, lanes)
    accumulators = vm * vectors_n
    fmas = accumulators
    loads = vm + vectors_n  # per k: a broadcast of A per row, the row's vectors of B
    if kernel.b_transposed:
        # B is read as vn rows of vk along k and transposed in registers: log2(lanes) shuffle
        # stages per vector of B, and all of the rows live while they are transposed. LLVM
        # transposes a tile of one vector each way well; any other shape costs several times that.
        regular = (vn <= lanes) & (vk <= lanes)
        shuffles = (p.transpose_cost * np.log2(lanes) * vectors_n
                    * np.where(regular, 1.0, p.irregular_transpose))
        acc_live = accumulators + 2.0  # with a transposed vector of B and a broadcast of A
        rows_live = acc_live + vn * _ceil_div(vk, lanes)
    else:
        # The accumulators, one k's vectors of B and a broadcast: what LLVM keeps live at least.
        shuffles = np.zeros_like(vm)
        acc_live = rows_live = accumulators + vectors_n + 1.0
    # Registers short: accumulators spill at every k, the rows of a step's transpose once a step.
    registers = target.vector_registers
    acc_spilled = np.maximum(acc_live - registers, 0.0)
    rows_spilled = np.maximum(rows_live - registers, 0.0) - acc_spilled
    loads = loads + p.spill_ops * (acc_spilled + rows_spilled / vk)
    # A distribution tile that does not divide its extent: every workgroup runs masked code.
    partial = ((np.mod(m, dm) != 0) | (np.mod(n, dn) != 0)).astype(np.float64)
    alu = fmas * (1.0 + partial * p.partial_tile_ops) + p.shuffle_fma_share * shuffles
    ports = np.stack([alu / p.fma_per_cycle, loads / p.loads_per_cycle, shuffles / p.shuffles_per_cycle])
    busiest = ports.max(axis=0)
    per_k = np.maximum(busiest + (1.0 - p.issue_overlap) * (ports.sum(axis=0) - busiest),
                       p.fma_latency + partial) + conflict_cycles(kernel, vm, vn, vk, target) \
        + walk_conflict_cycles(kernel, vm, vn, target)
    blocks = b * _ceil_div(m, vm) * _ceil_div(n, vn)
    steps = _ceil_div(k, vk)
    cycles = blocks * (k * per_k + steps * p.step_cycles)
    # no schedule issues FMAs faster than the core does: what memory adds comes on top of that
    # (candidates the model puts beyond it keep their order, a hair below it)
    floor = peak_seconds(kernel, target, 1) / speedup
    compute = cycles * cycle / speedup
    compute = np.where(compute < floor, floor + BEYOND_PEAK_ORDER * (compute - floor), compute)

    # L2 -> L1: a workgroup reads its dm x K panel of A and K x dn panel of B; a panel that does
    # not stay in L1 is read again for every register block that walks it (B once per vm rows,
    # A once per vn columns).
    a_panel, b_panel = dm * k * nbytes, k * dn * nbytes
    a_reads = np.where(a_panel <= target.l1_bytes, 1.0, _ceil_div(dn, vn))
    b_fits = b_panel <= target.l1_bytes
    if not kernel.b_transposed:
        # B [K, N] read a row segment a k: rows a multiple of L1's set span apart (N = 1024 f32,
        # 4 KiB) share its sets, and past its ways the panel is gone before the next block
        b_fits = b_fits & (rows_per_set(k, n * kernel.operand_bytes, target) <= target.l1_ways)
    b_reads = np.where(b_fits, 1.0, _ceil_div(dm, vm))
    if kernel.b_transposed:
        # B read across its rows: a step touches vn cache lines and uses vk elements of each;
        # once a block's vn x K strip outgrows L1 the lines are gone before the next step.
        line = 64.0 / nbytes
        strip_fits = vn * k * nbytes <= target.l1_bytes
        b_reads = b_reads * np.where(strip_fits, 1.0, np.maximum(1.0, line / vk))
    from_l2 = workgroups * (a_panel * a_reads + b_panel * b_reads + dm * dn * nbytes) * cycle / (
        p.l2_bytes_per_cycle * speedup)
    # Beyond L2 -> L2: every operand once when a workgroup's panels fit in L2, else per
    # workgroup; from the last-level cache where the operands fit there (a program called in a
    # loop finds them where its last call left them), else from DRAM. Priced at DRAM's rate
    # always, linear attention's written (Q K^T) V steps, 2 MiB between them, were predicted
    # 291 us on two cores of a Zen 4 VM (32 MiB L3), where IREE's whole program took 364.
    l2_fit = a_panel + b_panel <= target.l2_bytes
    unique = b * (m * k + k * n + m * n) * nbytes
    from_dram = np.where(l2_fit, unique, workgroups * (a_panel + b_panel + dm * dn * nbytes)) / (
        beyond_l2_bandwidth(unique, target))

    memory = np.maximum(from_l2, from_dram)
    exposed = (1.0 - p.overlap) * np.minimum(compute, memory)
    return np.maximum(compute, memory) + exposed + waves * target.workgroup_overhead


BEYOND_PEAK_ORDER = 1e-3
# The smallest extents of the two matmuls `sft-calibrate` reads data tiling's speed-ups on.
THIN_EXTENT, SQUARE_EXTENT = 8, 256


def peak_seconds(kernel: Kernel, target: TargetDesc, cores: int) -> float:
    """Seconds an f32 kernel's FMAs take at the core's measured rate on `cores` cores (0 where
    `sft-calibrate` did not measure it, or for a low-precision twin's dot products): no plan
    runs it faster. The kernel fit weighs each kernel's level lightly (load drifts between
    kernels), and its FLOP-rate scale is no rate a core reaches (a 2-core Zen 4: 196 GFLOP/s
    fitted, 113 measured): unfloored, the model put mlp's one-thread plan at 0.221 ms where
    its contractions alone take 0.30 at that rate, and it measured 0.33-0.36."""
    if not target.fma_peak_f32 or kernel.input_type:
        return 0.0
    return compute_floor(kernel.flops, target, cores)


def data_tiled_seconds(kernel: Kernel, options: ModuleOptions, target: TargetDesc, cores: int,
                       default: float) -> float:
    """Seconds a contraction takes under the options' codegen, where IREE's default code takes
    `default`: under data tiling, its FLOPs at the packed kernels' rate `sft-calibrate` measured
    on a 256^3 matmul and on a thin one (K = 8), interpolated in the log of the kernel's
    smallest extent, on `cores` cores; `default` where that was not measured. (A speed-up over
    the default's prediction, read on 256^3, priced mlp_b128's data-tiled plan 1.2x slower than
    IREE's default on a Zen 3 host, where IREE's default code runs its K = 1024 matmul at 20
    GFLOP/s a core and the packed one at 51-66.)"""
    square, thin = ((target.data_tiling_ukernel_rate, target.data_tiling_ukernel_thin_rate)
                    if options.ukernels else (target.data_tiling_rate, target.data_tiling_thin_rate))
    if not options.data_tiling or not square:
        return default
    share = math.log(max(min(kernel.m, kernel.n, kernel.k), 1) / THIN_EXTENT) / math.log(SQUARE_EXTENT / THIN_EXTENT)
    rate = square if not thin else thin + (square - thin) * min(max(share, 0.0), 1.0)
    return kernel.flops / (rate * parallel_speedup(cores, target))


def bandwidth(nbytes: float, target: TargetDesc, cores: int) -> float:
    """Bytes/s for streaming `nbytes` on `cores` cores: L2's where they fit in those cores' L2,
    the last-level cache's where they fit in half of it (the rest is other data's; a copy of
    2 x 16 MiB on a 32 MiB L3 ran at DRAM's rate) and its rate was measured, else DRAM's."""
    if nbytes <= target.l2_bytes * cores:
        return target.l2_bandwidth * parallel_speedup(cores, target)
    return beyond_l2_bandwidth(nbytes, target)


def beyond_l2_bandwidth(nbytes: float, target: TargetDesc) -> float:
    """Bytes/s for `nbytes` that live beyond L2: the last-level cache's rate where they fit in
    half of it and that rate was measured, else DRAM's."""
    if target.last_level_bandwidth and nbytes <= target.last_level_bytes / 2:
        return target.last_level_bandwidth
    return target.dram_bandwidth


def memory_bound(dispatch: Dispatch, target: TargetDesc, cores: int) -> float:
    """Seconds for a dispatch that streams its buffers once (elementwise, reductions, copies);
    one that moves a tensor into another layout walks it across rows, at the target's
    `relayout_cost` times the streaming time (data tiling's pack of a 256x1024 weight: 89 us on
    one core of the Xeon host against 23 us of its 2 MiB at L2's rate)."""
    work = dispatch.bytes / bandwidth(dispatch.bytes, target, cores)
    if dispatch.is_relayout:
        work *= target.relayout_cost
    if dispatch.is_contraction:  # one IREE has but the search does not tile (a convolution)
        work = max(work, compute_floor(dispatch.flops, target, cores) / untiled_efficiency(dispatch, target))
    return work


def untiled_efficiency(dispatch: Dispatch, target: TargetDesc) -> float:
    """Share of peak IREE's CPU code reaches on a contraction the search does not tile: its
    vector tile's parallel elements are accumulators, in vectors of the ISA's lanes (the lanes
    they fill), and fewer vectors than the FMA latency times the issue rate leave the FMA
    units waiting on the chains. A CNN training step's convolutions on one Zen 4 core (16
    lanes, latency 4.6, 2 FMAs a cycle): a filter gradient's 4 elements a tile ran 4.7 GFLOP/s
    and another 4-element one 5.6 (priced 3.1), a 16x8 tile 98 (priced 98); a 3-channel input
    one 36 and a stride-2 one 19 (both priced 98). `UNTILED_EFFICIENCY` where there is no CPU
    config (a GPU's, or none), and for the steps of a chain not yet formed."""
    if dispatch.gpu is not None or not dispatch.config or len(dispatch.config) < 2:
        return UNTILED_EFFICIENCY
    elements = math.prod(t for t in dispatch.config[1] if t) or 1
    vectors = math.ceil(elements / target.simd_f32)
    lanes = elements / (vectors * target.simd_f32)
    return lanes * min(1.0, vectors / (target.cpu.fma_latency * target.cpu.fma_per_cycle))


def contraction_floor(dispatch: Dispatch | None, target: TargetDesc, cores: int) -> float:
    """Seconds no tile config takes a contraction's dispatch below: its buffers streamed once
    at the rate of where they live. What IREE fuses into the dispatch is in them and not in the
    kernel's prediction: a training step's weight gradient that updates a 256x1024 weight and
    its momentum in the same dispatch (4.2 MB) took 204-251 us on one core of the Xeon host,
    where the kernel alone is 4 MFLOP."""
    return 0.0 if dispatch is None else dispatch.bytes / bandwidth(dispatch.bytes, target, cores)


def fused_seconds(dispatch: Dispatch | None, kernel: Kernel, target: TargetDesc, cores: int) -> float:
    """What the ops IREE fuses into a contraction's dispatch add to its kernel's time: the bytes
    the dispatch binds beyond the kernel's operands and result, after the kernel rather than
    under it: at the host's measured `fused_cost` (a Zen 3 VM's AdamW update of a 256x1024
    weight fused in order took 430-700 us on one core where its 5 MB stream in about 100),
    else streamed at the rate of where the dispatch's buffers live (its transposed reads are
    then `transposed_seconds`'s alone). A training step's weight gradient at batch 8 (256x1024x8, 4
    MFLOP) that also updates the weight and its moment (4.2 MB bound) took 100-107 us on one
    core of a Zen 4 VM: its kernel alone is predicted 54 and its bytes stream in 51."""
    if dispatch is None:
        return 0.0
    own = kernel.batch * ((kernel.m + kernel.n) * kernel.k * kernel.operand_bytes
                          + kernel.m * kernel.n * kernel.element_bytes)
    extra = max(dispatch.bytes - own, 0)
    if target.fused_cost:  # measured, in order: a walk across rows adds `transposed_seconds`
        return extra * target.fused_cost / target.l2_bandwidth / parallel_speedup(cores, target)
    return max(extra - dispatch.transposed_bytes, 0) / bandwidth(dispatch.bytes, target, cores)


def transposed_seconds(profile: Profile, target: TargetDesc, cores: int) -> float:
    """What the transposed accesses of the ops fused into contraction dispatches add: their
    bytes at the target's `transposed_cost` times L2's streaming rate, the rate that cost is
    measured against (a weight's update fits the last-level cache, not always L2: priced at
    DRAM's rate, an 8 MiB update predicted a 0.89 ms step at 3.4 ms), and their bodies' ops at
    `transposed_op_seconds` each a point, on every core."""
    nbytes = sum(d.transposed_bytes for d in profile.dispatches)
    work = sum(d.transposed_work for d in profile.dispatches)
    seconds = nbytes * target.transposed_cost / target.l2_bandwidth + work * target.transposed_op_seconds
    return seconds / parallel_speedup(cores, target)


def overheads(options: ModuleOptions, dispatch_count: int, target: TargetDesc) -> float:
    """Per-call and per-dispatch costs of the driver that runs the program."""
    if options.serial:
        return target.serial_invoke_overhead + dispatch_count * target.serial_dispatch_overhead
    return target.invoke_overhead + dispatch_count * target.dispatch_overhead


def other_dispatches(profile: Profile, kernels: list[Kernel]) -> list[Dispatch]:
    """The dispatches that no searched kernel accounts for."""
    covered = {k.domain for k in kernels}
    return [d for d in profile.dispatches if not (d.is_contraction and d.dims in covered)]


def compute_floor(flops: float, target: TargetDesc, cores: int) -> float:
    """Seconds no schedule beats: the work at the core's measured FMA rate where `sft-calibrate`
    measured it (the kernel fit's scale otherwise) on every usable core. `predict` never goes
    below it (lane use, reuse and spills only slow it down), so it bounds a branch."""
    return flops / ((target.fma_peak_f32 or target.peak_flops_f32) * parallel_speedup(cores, target))


def roofline(flops: float, nbytes: float, target: TargetDesc, cores: int) -> float:
    """Seconds no code beats on `cores` cores: its FLOPs at the peak rate (the FMA rate
    `sft-calibrate` measured where it did, else the model's scale) or its bytes at the bandwidth
    of where they live, whichever takes longer, every core at its full rate (the model's
    parallel efficiency is what IREE's executor gets, not a limit of the machine: with it, a
    step measured below its bound)."""
    ideal = replace(target, parallel_efficiency=1.0)
    return max(compute_floor(flops, ideal, cores), nbytes / bandwidth(nbytes, ideal, cores))


def program_bound(profile: Profile, target: TargetDesc, cores: int) -> float:
    """Seconds no code beats for a whole program on `cores` cores: the roofline of each of its
    distinct dispatches, summed (an executable run several times counts once: still a bound)."""
    return sum(roofline(d.flops, d.bytes, target, cores) for d in profile.dispatches)


def untiled_contraction(flops: float, nbytes: float, target: TargetDesc, cores: int) -> float:
    """A contraction the tile space does not cover, at half of peak or its bytes from DRAM."""
    return max(compute_floor(flops, target, cores) / UNTILED_EFFICIENCY, nbytes / target.dram_bandwidth)
