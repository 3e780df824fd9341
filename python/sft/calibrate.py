"""`sft-calibrate`: measure the host's numbers for the cost model with short IREE
microbenchmarks, fit the kernel model's free parameters to measured kernel times, and store
both where the `host` target (`targets/host.py`) finds them.

Two parts. `measure_host`: each program-level number comes from a pair of programs timed side
by side (interleaved processes, medians), so that what is measured is a difference or a ratio,
not one noisy absolute time. `fit_kernel_model`: a fixed, seeded sample of tile candidates of a
few synthetic contractions (`FIT_KERNELS`, none of them a kernel of the benchmark suite, so that
`sft-bench quality` measures the model on kernels the fit never saw) is timed alone, and the
parameters in `CpuModelParams.FITTED` (with the FLOP rate and the per-workgroup cost) are fitted
by bounded least squares on log time.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .backend import compile_module, profile
from .backend.bench import Variant, benchmark
from .backend.timing import loaded_call, time_in_processes
from .cost.hardware import CpuModelParams, TargetDesc
from .cost.model import predict
from .decisions.cpu_tiles import row_of_iree
from .targets import get_target
from .errors import SftError
from .measure import kernel_inputs, kernel_program
from .space.kernels import Kernel
from .space.options import DATA_TILING, SERIAL_DRIVER, UKERNELS
from .targets.host import calibration_identity, detected_description, store_calibration


def _maps(*texts: str) -> tuple[str, ...]:
    return tuple(f"affine_map<{t}>" for t in texts)


_MNK = "(d0, d1, d2) -> "
_BMNK = "(d0, d1, d2, d3) -> "
# The layout of every nn.Linear: weights stored [n, k], contiguous along k.
LINEAR = _maps(_MNK + "(d0, d2)", _MNK + "(d1, d2)", _MNK + "(d0, d1)")
PLAIN = _maps(_MNK + "(d0, d2)", _MNK + "(d2, d1)", _MNK + "(d0, d1)")
BATCHED = _maps(_BMNK + "(d0, d1, d3)", _BMNK + "(d0, d3, d2)", _BMNK + "(d0, d1, d2)")
MATMUL = Kernel(0, (256, 256, 256), ("m", "n", "k"), 4, LINEAR)
# The executor's speed-up is read off the slope from MATMUL to this one: on one small matmul,
# waking and meeting the workers reads as no speed-up at all (0.0 on a 2-core Zen 4 and on a
# 2-core Xeon from 256^3 alone, while 1024^3 runs 1.5x and 2.0x faster on both cores), and
# between 256^3 and 512^3 the executor's per-workgroup costs still hide most of it.
BIG_MATMUL = Kernel(0, (1024, 1024, 1024), ("m", "n", "k"), 4, LINEAR)

# The fit's kernels: fixed, and none of them a kernel of the benchmark suite (the suite's are
# what `sft-bench quality` holds out; test_calibrate checks the two never meet). Both layouts
# of B, a batched one, short and long reductions, narrow and wide n.
FIT_KERNELS = (
    Kernel(0, (192, 384, 256), ("m", "n", "k"), 4, LINEAR),
    Kernel(0, (48, 768, 192), ("m", "n", "k"), 4, LINEAR),
    Kernel(0, (96, 1024, 64), ("m", "n", "k"), 4, PLAIN),
    Kernel(0, (512, 128, 512), ("m", "n", "k"), 4, PLAIN),
    Kernel(0, (8, 64, 64, 64), ("b", "m", "n", "k"), 4, BATCHED),
)
FIT_CANDIDATES = 12   # per kernel, IREE's default among them
FIT_SEED = 0
FIT_ROUNDS = 3
SPLIT = 64 << 10  # floats in a dispatch that IREE's executor splits among its workers
CHAIN_CALLS = 200  # calls a round of the chains (a one-region chain: ~10 us a call)
# The FMA-rate programs: 32 Ki elements (128 KiB a buffer, in L2), 64 FMAs a chain. On a 2-core
# Zen 4 VM, one thread: AVX-512 code 99, 115, 116, 116 GFLOP/s with 2, 4, 6, 8 chains; AVX2
# code (SFT_HOST_CPU=znver3) 52, 72, 90, 116, and 54 with 12 (its 16 registers spill).
FMA_ELEMENTS, FMA_STEPS, FMA_CHAINS = 32 << 10, 64, (4, 6, 8)


def chain_program(regions: int, n: int) -> str:
    """`regions` dependent elementwise ops on a vector of n f32, each forced into a dispatch of
    its own by a flow.dispatch.region (IREE keeps such regions)."""
    ty = f"tensor<{n}xf32>"
    lines = [f"func.func @main(%x0: {ty}) -> {ty} {{"]
    for i in range(regions):
        lines += [
            f"  %x{i + 1} = flow.dispatch.region -> ({ty}) {{",
            f"    %e = tensor.empty() : {ty}",
            f"    %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],"
            f" iterator_types = [\"parallel\"]}} ins(%x{i} : {ty}) outs(%e : {ty}) {{",
            "    ^bb0(%a: f32, %b: f32):",
            "      %s = arith.addf %a, %a : f32",
            "      linalg.yield %s : f32",
            f"    }} -> {ty}",
            f"    flow.return %r : {ty}",
            "  }"]
    lines += [f"  return %x{regions} : {ty}", "}"]
    return "\n".join(lines) + "\n"


def fma_program(chains: int, steps: int, n: int = FMA_ELEMENTS) -> str:
    """An elementwise op on n f32 whose body is `chains` independent chains of `steps` dependent
    FMAs, summed: the vectorised loop keeps chains x (vectors per tile) FMAs in flight, so that
    the FMA units' issue rate, not their latency, bounds it (2 * chains * steps FLOP an element)."""
    ty = f"tensor<{n}xf32>"
    body = [f"      %c{c}_0 = arith.constant {c + 1}.0 : f32" for c in range(chains)]
    for i in range(steps):  # step by step, the chains interleaved; x is the program's: no folding
        body += [f"      %c{c}_{i + 1} = math.fma %c{c}_{i}, %x, %x : f32" for c in range(chains)]
    ends = [f"%c{c}_{steps}" for c in range(chains)]
    total = ends[0]
    for i, end in enumerate(ends[1:]):
        body.append(f"      %s{i} = arith.addf {total}, {end} : f32")
        total = f"%s{i}"
    return "\n".join([
        f"func.func @main(%in: {ty}) -> {ty} {{",
        f"  %e = tensor.empty() : {ty}",
        "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],"
        f" iterator_types = [\"parallel\"]}} ins(%in : {ty}) outs(%e : {ty}) {{",
        "    ^bb0(%x: f32, %o: f32):", *body, f"      linalg.yield {total} : f32",
        f"  }} -> {ty}", f"  return %r : {ty}", "}"]) + "\n"


def fma_peak(rounds: int, progress=None) -> float:
    """One core's FLOP/s on independent FMAs, inline on one thread: the fastest of a few chain
    counts (too few chains wait on the FMA's latency, too many spill registers), the inline
    call's cost left in (~2 us of 150-300). A lower bound of the core's peak, as close as IREE's
    own code comes."""
    target = get_target("host")
    variants = {chains: Variant(compile_module(fma_program(chains, FMA_STEPS), target), SERIAL_DRIVER)
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


def called(variants: dict, inputs: list[str], rounds: int, calls: int, progress=None) -> dict:
    """Median seconds per call of each variant called as sft's runtime calls a compiled program
    (`backend.timing.loaded_call`: from Python, a parallel executor's call waiting on sft's
    invoker thread), each in a process of its own, the variants taking turns. What the executor
    costs depends on that caller: IREE's benchmark tool waits on its own thread, which took the
    workers' cores (torch's MLP step at batch 128: 3.55 ms a call there, 2.6-2.9 from sft). A
    variant that fails reads None."""
    arrays = [_zeros(shape) for shape in inputs]
    builders = {name: (loaded_call, (v.artifact, v.device, arrays)) for name, v in variants.items()}
    seconds, _ = time_in_processes(builders, rounds, calls)
    if progress:
        progress(rounds * len(variants))
    return seconds


def _split_cost(t: dict) -> float:
    """Seconds a split dispatch adds on the executor, of one reading of the split chains. Load
    on the machine only ever adds to it: two calibrations of a 2-core Zen 4 VM an hour apart
    read 52 us where others, and the same chains timed alone, read 9-13."""
    if None in (t.get("split17/task"), t.get("split1/task")):
        return float("inf")
    return t["split17/task"] - t["split1/task"]


def measure_host(rounds: int = 7, progress=None) -> dict:
    """The measured program-level fields of the host's TargetDesc."""
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

    big, small = 4 << 20, 64 << 10  # 16 MiB per buffer: beyond every cache; 256 KiB: in L2
    stream, l2 = copy_seconds(big), copy_seconds(small)

    matmul = {}
    for name, flags in (("default", ()), ("dt", (DATA_TILING,)), ("dt+uk", (DATA_TILING, UKERNELS))):
        art = compile_module(kernel_program(MATMUL, None), target, flags)
        matmul[f"{name}/sync"] = Variant(art, SERIAL_DRIVER)
    m = benchmark(matmul, kernel_inputs(MATMUL), rounds=rounds, progress=progress)
    efficiency, small_matmul, _ = executor_reading(host.cores, rounds, progress)

    serial_dispatch = max((tool["chain17/sync"] - tool["chain1/sync"]) / 16, 0.0)
    # One core's FLOP rate scaled so that the model predicts IREE's default matmul as measured
    # (the kernel fit, when it runs, replaces it with its own).
    default = row_of_iree(MATMUL.roles, profile(kernel_program(MATMUL, None), target).dispatches[0].config)
    predicted = predict(MATMUL, np.zeros((1, 5), int), host, cores=1, default=default)[0]
    work = small_matmul["sync"] - t["chain1/sync"]
    speedup = 1.0 + (host.cores - 1) * efficiency
    # A call whose dispatches run on every worker: the matmul's time on the executor over its
    # work at that speed-up. Waking the workers is paid once a call (four 256^3 matmuls in one
    # call took 0.8-1.4 ms on two cores here, one took 0.5-0.6, 0.27 on one thread), so it is
    # a call's cost, not a dispatch's; a call that never splits costs the one-workgroup chain.
    parallel_call = max(small_matmul["task"] - work / speedup, t["chain1/task"]) - python_call
    # A split dispatch costs the executor its workers' meeting on top of the work (the serial
    # driver's time for it, shared among the cores at that efficiency): 4-9 us per dispatch on
    # this 2-core VM, where a one-workgroup chain reads none. Training steps have 20-120 such
    # dispatches.
    split_task = (t["split17/task"] - t["split1/task"]) / 16
    split_sync = (t["split17/sync"] - t["split1/sync"]) / 16
    dispatch = max(split_task - split_sync / speedup, 0.0)
    return {
        "invoke_overhead": max(parallel_call - dispatch, 0.0),
        "dispatch_overhead": dispatch,
        "serial_invoke_overhead": max(tool["chain1/sync"] - serial_dispatch, 0.0),
        "serial_dispatch_overhead": serial_dispatch,
        "dram_bandwidth": 2 * big * 4 / stream,
        "l2_bandwidth": 2 * small * 4 / max(l2 - tool["chain1/sync"], 1e-9),
        "peak_flops_f32": host.peak_flops_f32 * predicted / work,
        "parallel_efficiency": efficiency,
        "data_tiling_speedup": m["default/sync"] / m["dt/sync"],
        "data_tiling_ukernel_speedup": m["default/sync"] / m["dt+uk/sync"],
        "fma_peak_f32": fma_peak(rounds, progress),
    }


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
        small = called(variants["small"], kernel_inputs(MATMUL), rounds, 100, progress)
        large = called(variants["large"], kernel_inputs(BIG_MATMUL), rounds, 10, progress)
        added_task = max(large["task"] - small["task"], 1e-9)
        added_sync = max(large["sync"] - small["sync"], 1e-9)
        efficiency = min(max(added_sync / added_task - 1.0, 0.0) / max(cores - 1, 1), 1.0)
        if best is None or efficiency > best[0]:
            best = (efficiency, small, large)
    return best


@dataclass
class FitSample:
    """Measured kernel times: candidate rows (dm, dn, vm, vn, vk; IREE's default as its own
    tiles, not zeros) and seconds per call of the kernel alone."""

    kernel: Kernel
    candidates: np.ndarray
    seconds: np.ndarray


def sample_indices(space_size: int, count: int = FIT_CANDIDATES, seed: int = FIT_SEED) -> list[int]:
    """IREE's default (index 0) and a seeded uniform draw of the rest of a space: the same
    candidates on every run for the same space (the same ISA)."""
    rng = np.random.default_rng(seed)
    rest = rng.choice(np.arange(1, space_size), size=min(count - 1, space_size - 1), replace=False)
    return [0, *sorted(int(i) for i in rest)]


def measure_fit_samples(target=None, kernels=FIT_KERNELS, count: int = FIT_CANDIDATES,
                        rounds: int = FIT_ROUNDS, progress=None) -> list[FitSample]:
    """Compile (two at a time: iree-compile runs in its own process) and time the fit's sample
    of each kernel, alone and single-threaded, as `measure.measure_candidates` does (local-sync:
    `benchmark` reads CPU time). A candidate that fails to compile or run is left out."""
    target = get_target(target or "host")
    samples = []
    for kernel in kernels:
        space = target.codegen.space(kernel)
        indices = sample_indices(len(space), count)
        default = target.codegen.default(kernel, profile(kernel_program(kernel, None), target).dispatches[0])

        def build(index):
            try:
                artifact = compile_module(kernel_program(kernel, space.config(index)), target)
            except SftError:
                artifact = None
            if progress:
                progress()
            return index, artifact

        with ThreadPoolExecutor(2) as pool:
            built = {i: Variant(a, target.kernel_driver) for i, a in pool.map(build, indices) if a}
        # on local-sync, `benchmark` reads CPU time: robust to other processes on the machine
        seconds = benchmark(built, kernel_inputs(kernel), rounds=rounds, progress=progress,
                            cpu_time=True)
        ok = [i for i in indices if seconds.get(i)]
        rows = np.array([default if i == 0 else space.candidates[i] for i in ok], dtype=np.int64)
        samples.append(FitSample(kernel, rows, np.array([seconds[i] for i in ok])))
    return samples


def call_seconds(desc: TargetDesc) -> float:
    """What a kernel-alone program costs beyond the kernel's work: one inline call and its
    dispatch (the kernel's zero fill is fused into it)."""
    return desc.serial_invoke_overhead + desc.serial_dispatch_overhead


# The fitted parameters: (where, name, lower bound, upper bound, fitted in log space).
_FREE = (
    ("desc", "peak_flops_f32", 1e9, 1e13, True),
    ("desc", "workgroup_overhead", 1e-9, 2e-5, True),
    ("cpu", "fma_latency", 1.0, 12.0, False),
    ("cpu", "transpose_cost", 0.1, 10.0, False),
    ("cpu", "spill_ops", 0.0, 50.0, False),
    ("cpu", "partial_tile_ops", 0.0, 10.0, False),
    ("cpu", "step_cycles", 0.0, 50.0, False),
    ("cpu", "l2_bytes_per_cycle", 1.0, 256.0, True),
    ("cpu", "overlap", 0.0, 1.0, False),
    ("cpu", "issue_overlap", 0.0, 1.0, False),
)
assert {name for where, name, *_ in _FREE if where == "cpu"} == set(CpuModelParams.FITTED)


def _pack(desc: TargetDesc) -> np.ndarray:
    values = []
    for where, name, low, high, log in _FREE:
        value = min(max(getattr(desc if where == "desc" else desc.cpu, name), low), high)
        values.append(math.log(value) if log else value)
    return np.array(values)


def _unpack(desc: TargetDesc, x) -> TargetDesc:
    top, cpu = {}, {}
    for (where, name, _, _, log), value in zip(_FREE, x):
        (top if where == "desc" else cpu)[name] = float(math.exp(value) if log else value)
    return dataclasses.replace(desc, **top, cpu=dataclasses.replace(desc.cpu, **cpu))


def _bounds():
    low = [math.log(lo) if log else lo for _, _, lo, _, log in _FREE]
    high = [math.log(hi) if log else hi for _, _, _, hi, log in _FREE]
    return low, high


def predicted_seconds(samples: list[FitSample], desc: TargetDesc) -> list[np.ndarray]:
    """The model's seconds per call of each sample's candidates, the call's own cost included."""
    return [predict(s.kernel, s.candidates, desc, 1) + call_seconds(desc) for s in samples]


def pairwise_accuracy(samples: list[FitSample], predicted: list[np.ndarray], noise: float = 0.03) -> float:
    """Share of candidate pairs of the same kernel (measured more than `noise` apart) that the
    prediction orders as measured."""
    good = total = 0
    for s, p in zip(samples, predicted):
        i, j = np.triu_indices(len(s.seconds), 1)
        a, b = s.seconds[i], s.seconds[j]
        counted = np.abs(a - b) > noise * np.minimum(a, b)
        total += int(counted.sum())
        good += int((((p[i] < p[j]) == (a < b)) & counted).sum())
    return good / total if total else float("nan")


@dataclass(frozen=True)
class FitResult:
    desc: TargetDesc          # the description with the fitted parameters
    rms_log_error: float      # root mean square of log(predicted / measured) after the fit
    rms_log_error_before: float
    pairwise: float           # pairwise ordering accuracy on the fit sample, after
    pairwise_before: float
    samples: int

    def summary(self) -> dict:
        return {"rms_log_error": self.rms_log_error, "rms_log_error_before": self.rms_log_error_before,
                "pairwise": self.pairwise, "pairwise_before": self.pairwise_before,
                "samples": self.samples}


# How much a kernel's overall level counts in the fit beside the spread of its candidates: the
# candidates of one kernel take turns and see the same load, while load on a shared machine
# drifts between kernels timed a minute apart.
LEVEL_WEIGHT = 0.25
# A weak pull of each parameter toward its starting value (the ISA default), per unit of its
# bounds' span: 60 timings leave some parameters trading off against each other (a lower issue
# overlap for a higher FLOP rate and latency), and the pull settles them where the defaults
# are. On the synthetic kernels held out here it changed no ranking (pairwise within 0.01).
PRIOR_WEIGHT = 1.0


def fit_kernel_model(samples: list[FitSample], desc: TargetDesc,
                     prior_weight: float = PRIOR_WEIGHT) -> FitResult:
    """Bounded least squares on log time of the parameters in `_FREE`, from `desc`'s values:
    robust to a few noisy timings (soft L1), each kernel's mean log error weighted by
    `LEVEL_WEIGHT` against its candidates' deviations from it, each parameter pulled toward
    its start by `prior_weight`."""
    from scipy.optimize import least_squares

    measured = [np.log(s.seconds) for s in samples]

    def errors(x):
        return [np.log(p) - t for p, t in zip(predicted_seconds(samples, _unpack(desc, x)), measured)]

    start = _pack(desc)
    low, high = _bounds()
    span = np.array(high) - np.array(low)

    def residuals(x):
        fit = np.concatenate([e - (1.0 - LEVEL_WEIGHT) * e.mean() for e in errors(x)])
        return np.concatenate([fit, prior_weight * (x - start) / span])

    found = least_squares(residuals, start, bounds=(low, high), loss="soft_l1", f_scale=0.1,
                          diff_step=1e-3, x_scale="jac", max_nfev=2000)
    fitted = _unpack(desc, found.x)
    rms = lambda x: float(np.sqrt(np.mean(np.concatenate(errors(x)) ** 2)))
    return FitResult(fitted, rms(found.x), rms(start),
                     pairwise_accuracy(samples, predicted_seconds(samples, fitted)),
                     pairwise_accuracy(samples, predicted_seconds(samples, desc)),
                     sum(len(s.seconds) for s in samples))


def calibration_runs(rounds: int = 7, fit_rounds: int = FIT_ROUNDS) -> int:
    """Progress steps of `calibrate`: benchmark processes, and the fit's compiles."""
    # chains 4, split chains 4 a reading (and the chains' inline 2 in the benchmark tool),
    # copies 2, the matmul's option sets 3, the FMA programs, each executor reading 4
    return (11 + len(FMA_CHAINS) + 8 * EXECUTOR_READINGS) * rounds + len(FIT_KERNELS) * FIT_CANDIDATES * (1 + fit_rounds)


def calibrate(rounds: int = 7, progress=None, fit_rounds: int = FIT_ROUNDS) -> dict:
    """Measure the host, fit its kernel model and store both; returns what was stored:
    {"desc": measured fields, "cpu": kernel model parameters, "fit": the fit's quality}."""
    measured = measure_host(rounds, progress)
    desc = dataclasses.replace(detected_description(), **measured)
    samples = measure_fit_samples(count=FIT_CANDIDATES, rounds=fit_rounds, progress=progress)
    result = fit_kernel_model(samples, desc)
    for name in ("peak_flops_f32", "workgroup_overhead"):
        measured[name] = getattr(result.desc, name)
    stored = {"identity": calibration_identity(), "desc": measured,
              "cpu": dataclasses.asdict(result.desc.cpu), "fit": result.summary()}
    store_calibration(stored)
    return stored
