"""Measured verification: compile and time the search's best candidates beside IREE's default,
and keep the fastest measured.

Two levels. Kernels: each contraction's top-k tile candidates are compiled as a standalone
program (the kernel alone, zero inputs) and timed in their own processes with
iree-benchmark-module, single-threaded so that the numbers are stable. Program: the best option
sets, with the measured tiles, are compiled whole and timed on real inputs beside IREE's default.
A candidate that fails to compile, crashes, times out, or computes NaN or inf where IREE's default
does not, is recorded as failed and skipped; the tuning database keeps every measurement, so a
second run replays them. Given a farm (`backend/farm.py`), both levels compile on a Ray
cluster's workers and time each comparison on one worker of the target's machine.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from dataclasses import dataclass

from .backend import compile_module
from .backend.bench import Variant, benchmark
from .backend.cache import module_digest
from .backend.timing import loaded_call, time_together, time_variants
from .errors import SftError
from .decisions import KernelConfig, canonical
from .passes.hold_packed import packed_twin
from .passes.hold_transposed import holding
from .passes.split_batch import split_of
from .plan import Plan
from .search.candidates import TOP_OPTIONS, program_candidates
from .search.exhaustive import KernelChoice, SearchReport
from .space.kernels import Kernel
from .space.options import REASSOCIATE
from .targets import Target
from .tuning_db import TuningDB

_TYPES = {2: "f16", 4: "f32", 8: "f64"}
MARGIN = 0.03  # a measured gain under 3% is not taken (identical modules vary about that much)
TOGETHER_BYTES = 1 << 30  # verify's candidates share their timing processes up to this much input
SEARCH_REVISION = 61  # bump when the space or the cost model changes what a search would pick


def kernel_program(kernel: Kernel, config: KernelConfig | None) -> str:
    """A program of the kernel alone: C = sum over k of A * B with the kernel's index maps, zero
    initialised, with `config` imposed on it (IREE's choice when None)."""
    ty = _TYPES[kernel.element_bytes]
    shapes = []
    for text in kernel.maps:
        results = text.split("->")[1]
        shapes.append([kernel.domain[int(d)] for d in re.findall(r"d(\d+)", results)])

    def tensor(shape):
        return f"tensor<{'x'.join(map(str, shape))}x{ty}>"

    a, b, c = (tensor(s) for s in shapes)
    iterators = ", ".join('"reduction"' if r == "k" else '"parallel"' for r in kernel.roles)
    maps = ", ".join(m if m.startswith("affine_map") else f"affine_map<{m}>" for m in kernel.maps)
    attrs = f" attrs = {{compilation_info = {config.attribute()}}}" if config else ""
    return f"""func.func @main(%a: {a}, %b: {b}) -> {c} {{
  %zero = arith.constant 0.0 : {ty}
  %empty = tensor.empty() : {c}
  %init = linalg.fill ins(%zero : {ty}) outs(%empty : {c}) -> {c}
  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iterators}]}}
      ins(%a, %b : {a}, {b}) outs(%init : {c}){attrs} {{
  ^bb0(%x: {ty}, %y: {ty}, %acc: {ty}):
    %p = arith.mulf %x, %y : {ty}
    %s = arith.addf %acc, %p : {ty}
    linalg.yield %s : {ty}
  }} -> {c}
  return %r : {c}
}}
"""


def kernel_inputs(kernel: Kernel) -> list[str]:
    """Shape strings for iree-benchmark-module (zero-filled inputs: timing needs no data)."""
    ty = _TYPES[kernel.element_bytes]
    out = []
    for text in kernel.maps[:2]:
        dims = [kernel.domain[int(d)] for d in re.findall(r"d(\d+)", text.split("->")[1])]
        out.append("x".join(map(str, dims)) + "x" + ty)
    return out


@dataclass
class KernelMeasurement:
    best: int                      # candidate index measured fastest (0: IREE's default)
    seconds: dict                  # candidate index -> seconds, None where it failed


def measure_candidates(kernel: Kernel, space, indices, target: Target, db: TuningDB,
                       predicted: dict | None = None, rounds: int = 3, progress=None,
                       farm=None) -> dict:
    """Seconds per call of the kernel alone under each candidate index (None: failed), from
    the tuning database where known, else compiled and timed (and recorded); on `farm` (a
    `backend.farm.Farm`) where given."""
    workload, tkey = kernel.key(), target.key(SEARCH_REVISION)
    known = db.measurements(workload, tkey)
    predicted = predicted or {}
    seconds, variants, jobs = {}, {}, {}
    for index in indices:
        config = space.config(index)
        if canonical(config) in known:
            seconds[index] = known[canonical(config)]
        else:
            jobs[index] = (kernel_program(kernel, config), ())
    for index, built in compile_all(jobs, target, farm).items():
        if isinstance(built, SftError):
            seconds[index] = None
            config = canonical(space.config(index))
            db.record_measurement(workload, tkey, config, predicted.get(index), None)
        else:
            variants[index] = Variant(built, target.kernel_driver)
    if variants:
        # Kernels alone run inline (the host's local-sync): timed by their CPU time, robust to
        # the other processes of a shared machine.
        if farm is None:
            timed = benchmark(variants, kernel_inputs(kernel), rounds=rounds, progress=progress,
                              cpu_time=True)
        else:
            timed = farm.benchmark(target, variants, kernel_inputs(kernel), rounds, cpu_time=True)
            if progress:
                progress(len(variants) * rounds)
        for index, value in timed.items():
            seconds[index] = value
            db.record_measurement(workload, tkey, canonical(space.config(index)), predicted.get(index), value)
    return seconds


def compile_all(jobs: dict, target: Target, farm=None) -> dict:
    """name -> Artifact for each `name -> (text, flags)`, an SftError in place of those that
    failed to compile: on `farm`'s workers side by side where given, else here one by one."""
    if farm is not None:
        return farm.compile(jobs, target)
    built = {}
    for name, (text, flags) in jobs.items():
        try:
            built[name] = compile_module(text, target, flags)
        except SftError as e:
            built[name] = e
    return built


def measure_kernel(choice: KernelChoice, target: Target, db: TuningDB,
                   top_k: int = 3, progress=None, farm=None) -> KernelMeasurement:
    """Time the top-k predicted candidates and IREE's default of one kernel, alone (on `farm`
    where given)."""
    indices = list(dict.fromkeys([*choice.ranked[:top_k], 0]))
    seconds = measure_candidates(choice.kernel, choice.space, indices, target, db,
                                 dict(zip(choice.ranked, choice.predicted)), progress=progress,
                                 farm=farm)
    ok = {i: s for i, s in seconds.items() if s is not None}
    return KernelMeasurement(_significant_best(ok, 0) if ok else 0, seconds)


PACKED_TWINS = 3  # plans verify times again with their held weights packed


def verify(report: SearchReport, lower_plan, target: Target, inputs: list,
           db: TuningDB, top_options: int = TOP_OPTIONS, top_k: int = 3, rounds: int = 5,
           progress=None, keep: tuple[int, ...] = (), resident: tuple[int, ...] = (),
           storage: tuple = (), farm=None, extra: dict | None = None) -> Plan:
    """The fastest measured plan among the best predicted option sets (each with measured tiles;
    the best of each driver, fusion, packing and convolution strategy among them) and IREE's
    default, all timed side by side in each of two processes; candidates that compile to one
    module are timed once, under the first name (IREE's default before the option sets that
    change nothing in the program).
    `lower_plan(plan)` gives the program text a plan compiles from. Programs are timed on
    `inputs` as the compiled object calls them: those at `resident` (the model's state, donated
    inputs) uploaded once, the results at `keep` (a training step's new state) left there, and
    output storage of the `storage` specs passed after the arguments. Up to `PACKED_TWINS` plans
    that hold weights are timed again with them packed (`passes.hold_packed`). `extra` adds plans
    by name, each with its layout (a split, whose parts make the results as its
    `passes.split_batch.SplitLayout` says: `backend.parts`), or None."""
    tiles = ()
    tiled = next((o for o in report.ranked if o.options.keeps_tiles), None)
    if tiled is not None:
        picked = []
        for choice in tiled.kernels:
            result = measure_kernel(choice, target, db, top_k, progress=progress, farm=farm)
            for index, seconds in result.seconds.items():
                report.measured[f"op {choice.kernel.op_id} candidate {index}"] = seconds
            if result.best != 0:
                picked.append((choice.kernel.op_id, choice.space.config(result.best)))
        tiles = tuple(picked)
    layouts = {name: layout for name, (_, layout) in (extra or {}).items()}
    candidates = {**program_candidates(report, tiles, top_options),
                  **{name: plan for name, (plan, _) in (extra or {}).items()}}
    # the plans that hold weights, again with them packed (`passes.hold_packed`), whatever the
    # model predicts of them: the splits' first, then the best predicted, `PACKED_TWINS` of them
    twins = 0
    for name in dict.fromkeys([*(extra or {}), *candidates]):
        plan = candidates[name]
        try:
            twin = packed_twin(plan, target, lambda: lower_plan(dataclasses.replace(plan, flags=(), driver="")))
        except SftError:  # a plan that does not lower: not timed either
            twin = None
        if (twin is not None and twin not in candidates.values() and twins < PACKED_TWINS
                and f"{name}, packed" not in candidates):  # (a split's packed pick has the name)
            candidates[f"{name}, packed"], twins = twin, twins + 1
            layouts[f"{name}, packed"] = layouts.get(name)
    variants, plans, texts, jobs = {}, {}, {}, {}
    for name, plan in candidates.items():
        # Option sets differ in flags and driver, not in the program: lower each program once.
        program = dataclasses.replace(plan, flags=(), driver="")
        try:
            if program not in texts:
                texts[program] = lower_plan(program)
            jobs[name] = (texts[program], plan.iree_flags)
        except SftError:
            report.measured[f"program {name}"] = None
    built = compile_all(jobs, target, farm)
    timed_as = {}  # a candidate -> the one timed in its place: both compiled to one module
    first_of = {}
    for name, result in built.items():
        if isinstance(result, SftError):
            report.measured[f"program {name}"] = None
            continue
        plan = candidates[name]
        key = module_key(result.vmfb, plan)
        if key in first_of:  # flags that change nothing here: its time would be the other's
            timed_as[name] = first_of[key]  # plus noise (9% between the processes of one module)
            continue
        first_of[key] = name
        variants[name], plans[name] = Variant(result, plan.driver), plan
    # Programs are timed the way they are used, called from Python through iree.runtime, all
    # of them in each of two processes (`time_together`): one process's luck with IREE's
    # parallel executor (up to 1.55x for its whole life on a 2-core VM) is shared by what runs
    # in it, and had decided picks when each candidate had a process of its own. Where the
    # candidates' inputs would not fit many times over in one process, each gets its own.
    builders = {name: (loaded_call, (v.artifact, v.driver, inputs, keep, resident, storage,
                                     split_of(plans[name]) or (), layouts.get(name), "main",
                                     holding(plans[name])))
                for name, v in variants.items()}
    together = sum(np.asarray(a).nbytes for a in inputs) * len(builders) <= TOGETHER_BYTES
    if farm is not None:
        timings = farm.time_variants(target, builders, rounds, calls=20, together=together)
    elif together:
        timings = time_together(builders, rounds, calls=20)
    else:
        timings = time_variants(builders, rounds, calls=20)
    if progress:
        progress(len(variants) * rounds)
    dropped = non_finite_candidates({k: t.finite for k, t in timings.items()})
    # each candidate at its slower process's median: the JAX CNN step's parallel pick read
    # 0.87 ms in verify's processes and 2.49 in the bench's, where one thread read 0.95 in both
    timed = {k: (None if k in dropped else t.worst if t.worst is not None else t.seconds)
             for k, t in timings.items()}
    report.measured.update({f"program {k}": v for k, v in timed.items()})
    report.measured.update({f"program {k}": timed.get(v) for k, v in timed_as.items()})
    ok = {k: v for k, v in timed.items() if v is not None}
    if not ok:
        raise SftError("verify: no candidate plan, not even IREE's default, could be timed")
    best = least_asking(ok, plans, _significant_best(ok, "iree-default"))
    report.chosen = best
    return plans[best]


def module_key(vmfb: bytes, plan: Plan) -> tuple:
    """What two candidates share where timing one times the other: the module they compile to
    (`module_digest`), the driver that runs it, its split and the arguments held packed or
    transposed."""
    return module_digest(vmfb), plan.driver, split_of(plan) or (), tuple(sorted(holding(plan).items()))


def least_asking(seconds: dict, plans: dict, best: str) -> str:
    """Among the plans measured (`seconds`) as fast as `best` within noise on its driver, the
    one that asks least of IREE: options that change nothing in a program should not look like
    choices. Letting IREE reassociate reductions is no choice (never slower where measured): of
    two plans asking as much, the one with it."""
    peers = [n for n, t in seconds.items()
             if t <= seconds[best] * (1.0 + MARGIN) and plans[n].driver == plans[best].driver]
    asks = lambda n: (len(set(plans[n].flags) - {REASSOCIATE}), len(plans[n].tiles),  # noqa: E731
                      REASSOCIATE not in plans[n].flags, n != best)
    return min(peers, key=asks)


def non_finite_candidates(finite: dict, default: str = "iree-default") -> set:
    """The candidates to drop for their outputs: name -> whether its outputs on the real inputs
    were all finite (None: not known). A candidate with NaN or inf where IREE's default computes
    finite values is broken, however fast; where the default itself is not finite (or was not
    checked) the inputs may well call for it, and nothing is dropped."""
    if finite.get(default) is not True:
        return set()
    return {name for name, ok in finite.items() if ok is False}


def _significant_best(seconds: dict, default, margin: float = MARGIN):
    """The fastest measured, unless it beats `default` by less than `margin`: gains that small
    are within run-to-run noise here, and IREE's own choice is the safer one to keep."""
    best = min(seconds, key=seconds.get)
    if default in seconds and seconds[best] > seconds[default] * (1.0 - margin):
        return default
    return best
