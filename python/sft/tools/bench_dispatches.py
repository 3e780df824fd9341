"""sft-bench dispatches: where a model's time goes, kernel by kernel, under IREE's own compile
and under sft's plan (`search="model"`): each whole program run on one thread with IREE's
profiling of host execution (`backend.inprogram`), every dispatch timed where it runs, matched
by IREE's kernel names (root op, extents, types), and what the call spends between dispatches
(the VM, allocations, copies). It finds what a whole-program time hides: a kernel sft's lowering
made slower than IREE's (a convolution that lost its named op ran 37x slower), and where a
training step spends its time (90% in five matmuls for the MLP).

Models are those of `sft-bench speed` (inference) and `sft-bench train` (training steps, torch
and JAX).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from collections import defaultdict

from tqdm import tqdm

BETWEEN = "(between dispatches)"  # the row of a call's time outside every dispatch


def programs(program) -> dict[str, tuple[str, tuple[str, ...], dict[int, int]]]:
    """{"iree": (the front end's linalg, (), {}), "sft": (sft's planned program, its flags, the
    arguments it holds: `passes.hold_transposed.holding`)} for a prepared program, both as
    IREE compiles them (a plan
    that splits the batch in parts is compiled whole, its other decisions kept but a batch
    expansion that applies to a part's batch only)."""
    from ..api import compile_prepared
    from ..passes.hold_transposed import holding
    from ..errors import SftError
    from ..targets import get_target

    target = get_target("host")
    compiled = compile_prepared(program, program.module(), target, search="model", keep_ir=True)
    if compiled.plan.batch_split or compiled.plan.weight_split:  # its kernels timed whole, as IREE's are
        whole = replace(compiled.plan, batch_split=(), weight_split=())
        try:
            compiled = compile_prepared(program, program.module(), target, plan=whole, keep_ir=True)
        except SftError:  # a batch expansion that applies to a part's batch only (mha's, of 1)
            whole = replace(whole, expand=())
            compiled = compile_prepared(program, program.module(), target, plan=whole, keep_ir=True)
    return {"iree": (program.for_iree(program.linalg, target), (), {}),
            "sft": (compiled.stages.planned, compiled.plan.iree_flags,
                    holding(compiled.plan))}


def peaks(desc) -> dict:
    """The host's limits for one thread (dispatches are timed on one): the FLOP rate of one core
    (its measured FMA rate, where calibrated) and the bandwidths of L2 and DRAM, from the
    description the cost model uses (calibrated or detected: `calibration`)."""
    from ..targets.host import calibration_state

    return {"flops_per_s": desc.fma_peak_f32 or desc.peak_flops_f32, "l2_bytes_per_s": desc.l2_bandwidth,
            "dram_bytes_per_s": desc.dram_bandwidth, "l2_bytes": desc.l2_bytes,
            "calibration": calibration_state()}


def dispatch_row(name: str, rounds: int = 3, calls: int = 20) -> dict:
    """Per kernel name: seconds per call summed over its executables under each variant (the
    median of `rounds` runs of `calls` calls, the variants taking turns; None where a variant
    failed), the FLOPs and bytes IREE's profile gives them (`work`), and each kernel's roofline
    bound on one core (`bound_s`: its FLOPs at the core's peak or its bytes at the bandwidth of
    where they live, whichever is longer; FLOPs are counted for contractions only, the other
    dispatches are bound by their bytes); `BETWEEN`, the call's time outside them; the totals
    of both (the whole call)."""
    from ..backend import compile_module, profile
    from ..backend.bench import Variant
    from ..backend.inprogram import profile_program
    from ..cost.model import roofline
    from ..errors import SftError
    from ..passes.hold_transposed import held_array
    from ..targets import get_target
    from .bench_quality_programs import program_of

    target = get_target("host")
    program = program_of(name)
    variants = programs(program)
    inputs = program.timing_inputs()
    runs: dict = {v: [] for v in variants}
    work: dict = defaultdict(dict)
    artifacts = {}
    for variant, (text, flags, _) in variants.items():
        artifacts[variant] = compile_module(text, target, flags)
        for d in profile(text, target, flags).dispatches:
            done = work[d.name].setdefault(variant, {"flops": 0.0, "bytes": 0, "bound_s": 0.0})
            done["flops"] += d.flops
            done["bytes"] += d.bytes
            done["bound_s"] += roofline(d.flops, d.bytes, target.desc, 1)
    with tqdm(desc=f"{name} dispatches", total=rounds * len(variants), unit="run", leave=False) as bar:
        for _ in range(rounds):
            for variant, artifact in artifacts.items():
                if runs[variant] is not None:
                    try:  # on one thread, as the search times kernels
                        held = variants[variant][2]  # as the plan takes them
                        args = [held_array(a, held[i]) if i in held else a for i, a in enumerate(inputs)]
                        runs[variant].append(profile_program(
                            Variant(artifact, target.kernel_driver), args, calls, program.entry))
                    except SftError:
                        runs[variant] = None
                bar.update()
    kernels: dict = defaultdict(dict)
    for variant, found in runs.items():
        per_kernel = defaultdict(list)
        for times in found or []:
            summed = defaultdict(float)
            for d in times.dispatches:
                summed[d.kernel] += d.seconds_per_call
            summed[BETWEEN] = times.between_seconds
            for kernel, seconds in summed.items():
                per_kernel[kernel].append(seconds)
        for kernel, samples in per_kernel.items():
            kernels[kernel][variant] = statistics.median(samples)
    work = {k: w for k, w in work.items() if k in kernels}  # kernels that were timed
    totals = {v: (statistics.median(t.call_seconds for t in runs[v]) if runs[v] else None)
              for v in variants}
    bounds = {v: sum(w[v]["bound_s"] for w in work.values() if v in w) for v in variants}
    return {"model": name, "kernels": dict(kernels), "total_s": totals, "work": work,
            "bound_s": bounds, "peaks": peaks(target.desc)}


def _us(seconds) -> str:
    return f"{'-':>9}" if seconds is None else f"{seconds * 1e6:9.1f}"


def _of_bound(seconds, bound) -> str:
    return f"{seconds / bound:6.1f}x" if seconds and bound else "      -"


def print_row(row: dict, top: int = 12) -> None:
    kernels, work, p = row["kernels"], row["work"], row["peaks"]
    order = sorted(kernels, key=lambda k: -max(v or 0.0 for v in kernels[k].values()))
    order = [k for k in order if k != BETWEEN][:top] + [BETWEEN] * (BETWEEN in kernels)
    print(f"{row['model']}: us per call, kernel by kernel, each where it runs in its program (one "
          f"thread), IREE's own compile / sft's plan; the roofline bound on one core ({p['flops_per_s'] / 1e9:.0f} GFLOP/s, L2 "
          f"{p['l2_bytes_per_s'] / 1e9:.0f} GB/s, DRAM {p['dram_bytes_per_s'] / 1e9:.0f} GB/s: "
          f"{p['calibration']}) and how far each is from it")
    print(f"  {'kernel':<48} {'IREE':>9} {'sft':>9} {'speedup':>7} {'bound':>9} {'IREE/b':>7} "
          f"{'sft/b':>7} {'sft GF/s':>8}")
    for kernel in order:
        iree, ours = kernels[kernel].get("iree"), kernels[kernel].get("sft")
        ratio = f"{iree / ours:6.2f}x" if iree and ours else "      -"
        bound = {v: w["bound_s"] for v, w in work.get(kernel, {}).items()}
        flops = work.get(kernel, {}).get("sft", {}).get("flops", 0.0)
        rate = f"{flops / ours / 1e9:8.1f}" if ours and flops else "       -"
        print(f"  {kernel[:48]:<48} {_us(iree)} {_us(ours)} {ratio} {_us(bound.get('sft'))} "
              f"{_of_bound(iree, bound.get('iree'))} {_of_bound(ours, bound.get('sft'))} {rate}")
    total, bounds, rest = row["total_s"], row["bound_s"], len(kernels) - len(order)
    label = "whole call" + (f" ({rest} more kernels)" if rest > 0 else "")
    ratio = f"{total['iree'] / total['sft']:6.2f}x" if total["sft"] and total["iree"] else ""
    print(f"  {label:<48} {_us(total['iree'])} {_us(total['sft'])} {ratio:>7} {_us(bounds['sft'])} "
          f"{_of_bound(total['iree'], bounds['iree'])} {_of_bound(total['sft'], bounds['sft'])}")


def plot_roofline(result: dict, path: str) -> None:
    """Every kernel of every row on the one-core roofline: arithmetic intensity (FLOPs per byte)
    against achieved GFLOP/s, IREE's compile and sft's plan, under the roofs of the peaks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 5))
    for variant, marker in (("iree", "o"), ("sft", "x")):
        points = [(w[variant]["flops"] / w[variant]["bytes"], w[variant]["flops"] / t[variant] / 1e9)
                  for row in result["rows"] for k, t in row["kernels"].items()
                  for w in [row["work"].get(k, {})]
                  if variant in w and w[variant]["flops"] and w[variant]["bytes"] and t.get(variant)]
        if points:
            ax.scatter(*zip(*points), marker=marker, label=f"{variant} kernels")
    p = result["rows"][0]["peaks"]
    intensity = np.logspace(-2, 3, 100)
    for name, bw in (("L2", p["l2_bytes_per_s"]), ("DRAM", p["dram_bytes_per_s"])):
        ax.plot(intensity, np.minimum(p["flops_per_s"], intensity * bw) / 1e9, label=f"roof ({name})")
    ax.set(xscale="log", yscale="log", xlabel="FLOPs per byte", ylabel="GFLOP/s (one thread)",
           title=f"sft-bench dispatches: the one-core roofline ({p['calibration']})")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=150, bbox_inches="tight")


def dispatches(models: list[str], rounds: int, calls: int = 20) -> dict:
    rows = []
    for name in models:
        rows.append(dispatch_row(name, rounds, calls))
        print_row(rows[-1])
    return {"rows": rows}
