"""`sft-calibrate`: measure the host's numbers for the cost model with short IREE
microbenchmarks, fit the kernel model's free parameters to measured kernel times
(`kernel_fit`), and store both where the `host` target (`targets/host.py`) finds them.

`measure_host`: each program-level number comes from a pair of programs timed side by side
(interleaved processes, medians), so that what is measured is a difference or a ratio, not one
noisy absolute time; the core's FMA rate from programs of independent FMAs (`fma_peak`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .backend import compile_module, profile
from .backend.bench import Variant, benchmark
from .backend.timing import loaded_call, time_in_processes
from .cost.hardware import TargetDesc
from .cost.model import memory_bound, predict
from .decisions.cpu_tiles import row_of_iree
from .errors import SftError
from .kernel_fit import (FIT_CANDIDATES, FIT_KERNELS, FIT_ROUNDS, LINEAR, PLAIN, fit_kernel_model,
                         measure_fit_samples)
from .measure import kernel_inputs, kernel_program
from .calibrate_layouts import PACKED_SHAPES, UPDATE_SHAPES, layout_costs
from .probe_programs import chain_program, fma_program, probe_program, UPDATE_BODIES
from .space.kernels import Kernel
from .space.options import DATA_TILING, SERIAL_DRIVER, UKERNELS
from .targets import get_target
from .targets.host import calibration_identity, detected_description, store_calibration

MATMUL = Kernel(0, (256, 256, 256), ("m", "n", "k"), 4, LINEAR)
# The executor's speed-up is read off the slope from MATMUL to this one: on one small matmul,
# waking and meeting the workers reads as no speed-up at all (0.0 on a 2-core Zen 4 and on a
# 2-core Xeon from 256^3 alone, while 1024^3 runs 1.5x and 2.0x faster on both cores), and
# between 256^3 and 512^3 the executor's per-workgroup costs still hide most of it.
BIG_MATMUL = Kernel(0, (1024, 1024, 1024), ("m", "n", "k"), 4, LINEAR)
# Data tiling's rates are read on MATMUL and on this thin one (a weight gradient's shape at
# batch 8, none of the suite's): `cost.model.data_tiled_seconds` interpolates between the two.
THIN_MATMUL = Kernel(0, (192, 768, 8), ("m", "n", "k"), 4, PLAIN)

SPLIT = 64 << 10  # floats in a dispatch that IREE's executor splits among its workers
CHAIN_CALLS = 200  # calls a round of the chains (a one-region chain: ~10 us a call)
# The FMA-rate programs: 32 Ki elements (128 KiB a buffer, in L2), 64 FMAs a chain. On a 2-core
# Zen 4 VM, one thread: AVX-512 code 99, 115, 116, 116 GFLOP/s with 2, 4, 6, 8 chains; AVX2
# code (SFT_HOST_CPU=znver3) 52, 72, 90, 116, and 54 with 12 (its 16 registers spill).
FMA_ELEMENTS, FMA_STEPS, FMA_CHAINS = 32 << 10, 64, (4, 6, 8)


def copy_sizes(host: TargetDesc) -> tuple[int, int, int]:
    """Floats per buffer of the copies that read the host's bandwidths: 256 KiB (in L2); an
    eighth of the last-level cache (both buffers in a quarter of it), or 0 where that would not
    leave L2; twice the last-level cache (beyond every cache: a 2-core Zen 4's 2 x 16 MiB, the
    size of its L3, had read 36-40 GB/s; beyond it, 23.5)."""
    llc = host.last_level_bytes
    middle = llc // 32 if llc // 4 > host.l2_bytes * host.cores else 0
    return 64 << 10, middle, max(4 << 20, llc // 2)


def fma_peak(rounds: int, progress=None) -> float:
    """One core's FLOP/s on independent FMAs, inline on one thread: the fastest of a few chain
    counts (too few chains wait on the FMA's latency, too many spill registers), the inline
    call's cost left in (~2 us of 150-300). A lower bound of the core's peak, as close as IREE's
    own code comes."""
    target = get_target("host")
    variants = {chains: Variant(compile_module(fma_program(chains, FMA_STEPS, FMA_ELEMENTS), target),
                                SERIAL_DRIVER)
                for chains in FMA_CHAINS}
    seconds = benchmark(variants, [f"{FMA_ELEMENTS}xf32"], rounds=rounds, progress=progress)
    rates = [2 * chains * FMA_STEPS * FMA_ELEMENTS / s for chains, s in seconds.items() if s]
    if not rates:
        raise SftError("sft-calibrate: the FMA-rate programs failed to run on local-sync")
    return max(rates)


def _zeros(shape: str) -> np.ndarray:
    """The zero array of a shape string ("256x256xf32")."""
    *dims, ty = shape.split("x")
    return np.zeros([int(d) for d in dims], {"f32": np.float32, "f16": np.float16}[ty])


def called(variants: dict, inputs: list[str], rounds: int, calls: int, progress=None,
           keep: tuple[int, ...] = (), resident: tuple[int, ...] = (), processes: int = 1) -> dict:
    """Median seconds per call of each variant called as sft's runtime calls a compiled program
    (`backend.timing.loaded_call`: from Python, a parallel executor's call waiting on sft's
    invoker thread), each in a process of its own, the variants taking turns. What the executor
    costs depends on that caller: IREE's benchmark tool waits on its own thread, which took the
    workers' cores (torch's MLP step at batch 128: 3.55 ms a call there, 2.6-2.9 from sft). The
    arguments at positions `resident` are uploaded once and the results at `keep` stay on the
    device, as a compiled model holds its weights: an upload costs the parallel executor more
    than the inline driver (a 256^3 matmul's weight: 85 us a call against 25 on a 2-core Zen 4,
    read as the executor's cost until it was held). Each variant runs in `processes` processes,
    the median of theirs. A variant that fails reads None."""
    arrays = [_zeros(shape) for shape in inputs]
    builders = {name: (loaded_call, (v.artifact, v.device, arrays, keep, resident))
                for name, v in variants.items()}
    seconds, _ = time_in_processes(builders, rounds, calls, processes=processes)
    if progress:
        progress(rounds * len(variants) * processes)
    return seconds


def _split_cost(t: dict) -> float:
    """Seconds a split dispatch adds on the executor, of one reading of the split chains. Load
    on the machine only ever adds to it: two calibrations of a 2-core Zen 4 VM an hour apart
    read 52 us where others, and the same chains timed alone, read 9-13."""
    if None in (t.get("split17/task"), t.get("split1/task")):
        return float("inf")
    return t["split17/task"] - t["split1/task"]


# (M, D, H) of the program the parallel executor's per-call cost is read on: two matmuls with
# an elementwise op between them, an MLP's forward of the size the suite's programs have
# (0.2-0.4 ms on one core) and none of its shapes.
PROBE_MLP = (48, 192, 768)


def executor_call_cost(target, speedup: float, dispatch: float, inline: tuple[float, float],
                       python_call: float, rounds: int, progress=None) -> float:
    """Seconds a call on the parallel executor costs beyond its dispatches' work shared among
    the cores (`speedup`) and `dispatch` per split dispatch: read on `PROBE_MLP`, a program of
    the size programs have, on both drivers side by side (the work is the
    inline driver's time less its costs, `inline`: per call and per dispatch). The lowest of
    `EXECUTOR_READINGS` readings (load only adds). Read on one 256^3 matmul whose operands were
    uploaded every call it was 240 us on a 2-core Zen 4, where the suite's programs, their
    weights held, paid 110-140 us a call (docs/results.md)."""
    m, d, h = PROBE_MLP
    text = probe_program(m, d, h)
    art = compile_module(text, target)
    seen = profile(text, target)
    variants = {"sync": Variant(art, SERIAL_DRIVER), "task": Variant(art)}
    inputs = [f"{m}x{d}xf32", f"{d}x{h}xf32", f"{h}x{d}xf32"]
    costs = []
    for _ in range(EXECUTOR_READINGS):
        # weights held and the result kept, as a compiled model runs; a process's luck with the
        # executor lasts its life (one read 98 us, the next 190 on the same matmul): the median
        # of three processes
        t = called(variants, inputs, rounds, 50, progress, keep=(0,), resident=(1, 2), processes=3)
        if None in t.values():
            continue
        work = max(t["sync"] - python_call - inline[0] - seen.dispatch_count * inline[1], 0.0)
        costs.append(t["task"] - python_call - work / speedup - seen.split_count * dispatch)
    if not costs:
        raise SftError("sft-calibrate: the executor's probe program failed to run")
    return max(min(costs), 0.0)


def measure_host(rounds: int = 7, progress=None) -> dict:
    """The measured program-level fields of the host's TargetDesc: what a call and a dispatch
    cost on each driver, the bandwidths, the FLOP rates and the executor's efficiency (what
    `sft doctor` checks the host against; `calibrate` adds the layouts' costs and data tiling's
    rates)."""
    host, target = detected_description(), get_target("host")
    # Two sizes of element: 256 floats run as one workgroup (what a call and a dispatch cost),
    # 64 Ki floats are split among the executor's workers, which then meet once per dispatch.
    # `t`: as sft calls programs (the executor's costs depend on its caller); `tool`: the inline
    # chains in IREE's benchmark tool, as kernels are timed alone (the fit takes their call's cost)
    t, tool = {}, {}
    for prefix, n in (("chain", 256), ("split", SPLIT)):
        variants = {}
        for regions in (1, 17):
            art = compile_module(chain_program(regions, n), target)
            variants[f"{prefix}{regions}/task"] = Variant(art)
            variants[f"{prefix}{regions}/sync"] = Variant(art, SERIAL_DRIVER)
        if prefix == "split":
            t.update(min((called(variants, [f"{n}xf32"], rounds, CHAIN_CALLS, progress)
                          for _ in range(EXECUTOR_READINGS)), key=_split_cost))
        else:
            t.update(called(variants, [f"{n}xf32"], rounds, CHAIN_CALLS, progress))
        if prefix == "chain":
            inline = {k: v for k, v in variants.items() if k.endswith("/sync")}
            tool.update(benchmark(inline, [f"{n}xf32"], rounds=rounds, progress=progress))
    # what a call from Python costs on any driver: left out of the executor's cost, which the
    # model compares with the inline driver's as the benchmark tool reads it
    python_call = max(t["chain1/sync"] - tool["chain1/sync"], 0.0)

    def copy_seconds(n: int) -> float:
        variant = Variant(compile_module(chain_program(1, n), target), SERIAL_DRIVER)
        return benchmark({"copy": variant}, [f"{n}xf32"], rounds=rounds, progress=progress)["copy"]

    small, middle, big = copy_sizes(host)
    stream, l2 = copy_seconds(big), copy_seconds(small)
    in_llc = copy_seconds(middle) if middle else None

    efficiency, small_matmul, _ = executor_reading(host.cores, rounds, progress)

    serial_dispatch = max((tool["chain17/sync"] - tool["chain1/sync"]) / 16, 0.0)
    serial_invoke = max(tool["chain1/sync"] - serial_dispatch, 0.0)
    # One core's FLOP rate scaled so that the model predicts IREE's default matmul as measured
    # (the kernel fit, when it runs, replaces it with its own).
    default = row_of_iree(MATMUL.roles, profile(kernel_program(MATMUL, None), target).dispatches[0].config)
    predicted = predict(MATMUL, np.zeros((1, 5), int), host, cores=1, default=default)[0]
    work = small_matmul["sync"] - t["chain1/sync"]
    speedup = 1.0 + (host.cores - 1) * efficiency
    # A split dispatch costs the executor its workers' meeting on top of the work (the serial
    # driver's time for it, shared among the cores at that efficiency): 4-9 us per dispatch on
    # this 2-core VM, where a one-workgroup chain reads none. Training steps have 20-120 such
    # dispatches.
    split_task = (t["split17/task"] - t["split1/task"]) / 16
    split_sync = (t["split17/sync"] - t["split1/sync"]) / 16
    dispatch = max(split_task - split_sync / speedup, 0.0)
    # Waking the workers is paid once a call (four 256^3 matmuls in one call took 0.8-1.4 ms on
    # two cores here, one took 0.5-0.6, 0.27 on one thread), so it is a call's cost, not a
    # dispatch's; a call that never splits costs the one-workgroup chain.
    parallel_call = (executor_call_cost(target, speedup, dispatch, (serial_invoke, serial_dispatch),
                                        python_call, rounds, progress)
                     if host.cores > 1 else 0.0)
    l2_bandwidth = 2 * small * 4 / max(l2 - tool["chain1/sync"], 1e-9)
    measured = {
        "invoke_overhead": max(parallel_call, t["chain1/task"] - python_call, 0.0),
        "dispatch_overhead": dispatch,
        "serial_invoke_overhead": serial_invoke,
        "serial_dispatch_overhead": serial_dispatch,
        "dram_bandwidth": 2 * big * 4 / stream,
        "last_level_bandwidth": 2 * middle * 4 / in_llc if in_llc else 0.0,
        "l2_bandwidth": l2_bandwidth,
        "peak_flops_f32": host.peak_flops_f32 * predicted / work,
        "parallel_efficiency": efficiency,
        "fma_peak_f32": fma_peak(rounds, progress),
    }
    return measured


def data_tiling_rates(target, desc: TargetDesc, rounds: int, progress=None) -> dict:
    """The FLOP/s of data tiling's packed kernels (with and without IREE's micro-kernels) on
    `MATMUL` and `THIN_MATMUL`, one thread: each program timed whole, less what `desc` prices
    its pack and unpack executables and its call at (the search prices those apart), the kernel
    at least half of the whole. A rate left out is one that did not run (0: not measured)."""
    rates = {}
    for kernel, shape in ((MATMUL, ""), (THIN_MATMUL, "thin_")):
        text = kernel_program(kernel, None)
        flag_sets = {f"data_tiling_{shape}rate": (DATA_TILING,),
                     f"data_tiling_ukernel_{shape}rate": (DATA_TILING, UKERNELS)}
        variants = {name: Variant(compile_module(text, target, flags), SERIAL_DRIVER)
                    for name, flags in flag_sets.items()}
        seconds = benchmark(variants, kernel_inputs(kernel), rounds=rounds, progress=progress)
        for name, flags in flag_sets.items():
            if seconds[name] is None:
                continue
            dispatches = profile(text, target, flags).dispatches
            apart = (sum(memory_bound(d, desc, 1) for d in dispatches if not d.is_contraction)
                     + desc.serial_invoke_overhead + len(dispatches) * desc.serial_dispatch_overhead)
            rates[name] = kernel.flops / max(seconds[name] - apart, seconds[name] / 2)
    return rates


# The executor's speed-up and its cost a split dispatch are read this many times; the highest
# speed-up and the lowest cost are kept.
EXECUTOR_READINGS = 3


def executor_reading(cores: int, rounds: int, progress=None) -> tuple[float, dict, dict]:
    """(parallel efficiency, {"sync", "task"} seconds of the 256^3 matmul, the same of the
    1024^3 one) on IREE's default code. The speed-up on added work is the slope from the small
    matmul to the large one on each driver, so that what a parallel dispatch costs whatever its
    size (waking and meeting the workers) cancels out instead of reading as a lost core; that
    cost is the intercept. Other work on the machine only ever takes cores away from the
    executor (one reading of 0.0 was stored on a 2-core Zen 4 whose 1024^3 matmul runs 2.06x
    faster on both cores), so of `EXECUTOR_READINGS` readings the highest is kept."""
    target = get_target("host")
    variants = {}
    for name, kernel in (("small", MATMUL), ("large", BIG_MATMUL)):
        art = compile_module(kernel_program(kernel, None), target)
        variants[name] = {"sync": Variant(art, SERIAL_DRIVER), "task": Variant(art)}
    best = None
    for _ in range(EXECUTOR_READINGS if cores > 1 else 1):
        # operands held and results kept: the work alone, not its uploads and downloads
        small = called(variants["small"], kernel_inputs(MATMUL), rounds, 100, progress, (0,), (0, 1))
        large = called(variants["large"], kernel_inputs(BIG_MATMUL), rounds, 10, progress, (0,), (0, 1))
        added_task = max(large["task"] - small["task"], 1e-9)
        added_sync = max(large["sync"] - small["sync"], 1e-9)
        efficiency = min(max(added_sync / added_task - 1.0, 0.0) / max(cores - 1, 1), 1.0)
        if best is None or efficiency > best[0]:
            best = (efficiency, small, large)
    return best


def calibration_runs(rounds: int = 7, fit_rounds: int = FIT_ROUNDS) -> int:
    """Progress steps of `calibrate`: benchmark processes, and the fit's compiles."""
    # chains 4, split chains 4 a reading (and the chains' inline 2 in the benchmark tool),
    # copies 3, the relayout 2, the two matmuls' option sets 2 each, the FMA programs, each
    # executor reading 4 and its probe's 2 in 3 processes, the packed matmuls 2 a shape, the
    # updates 2 an optimizer a shape across rows and 2 in order
    return ((15 + len(FMA_CHAINS) + 14 * EXECUTOR_READINGS + 2 * len(PACKED_SHAPES)
             + 4 * len(UPDATE_BODIES) * len(UPDATE_SHAPES))
            * rounds + len(FIT_KERNELS) * FIT_CANDIDATES * (1 + fit_rounds))


def calibrate(rounds: int = 7, progress=None, fit_rounds: int = FIT_ROUNDS) -> dict:
    """Measure the host, fit its kernel model and store both; returns what was stored:
    {"desc": measured fields, "cpu": kernel model parameters, "fit": the fit's quality}."""
    measured = measure_host(rounds, progress)
    target = get_target("host")
    measured.update(layout_costs(target, measured["l2_bandwidth"], rounds, progress))
    measured.update(data_tiling_rates(target, dataclasses.replace(detected_description(), **measured),
                                      rounds, progress))
    desc = dataclasses.replace(detected_description(), **measured)
    samples = measure_fit_samples(count=FIT_CANDIDATES, rounds=fit_rounds, progress=progress)
    result = fit_kernel_model(samples, desc)
    for name in ("peak_flops_f32", "workgroup_overhead"):
        measured[name] = getattr(result.desc, name)
    stored = {"identity": calibration_identity(), "desc": measured,
              "cpu": dataclasses.asdict(result.desc.cpu), "fit": result.summary()}
    store_calibration(stored)
    return stored
