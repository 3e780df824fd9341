"""sft-bench dispatches: where a model's time goes, kernel by kernel, under IREE's own compile
and under sft's plan (`search="model"`): every executable of each program compiled alone and
timed on one thread (`backend.dispatches`), matched by IREE's kernel names (root op, extents,
types). It finds what a whole-program time hides: a kernel sft's lowering made slower than
IREE's (a convolution that lost its named op ran 37x slower), and where a training step spends
its time (95% in five matmuls for the MLP).

Models are those of `sft-bench speed` (inference) and `sft-bench train` (training steps, torch
and JAX).
"""

from __future__ import annotations

from collections import defaultdict

from tqdm import tqdm


def programs(name: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{"iree": (the front end's linalg, ()), "sft": (sft's planned program, its flags)} for a
    suite model or training step."""
    from ..api import compile_prepared
    from ..targets import get_target
    from .bench_quality_programs import program_of

    program = program_of(name)
    compiled = compile_prepared(program, program.module(), get_target("host"), search="model",
                                keep_ir=True)
    return {"iree": (program.linalg, ()), "sft": (compiled.stages.planned, compiled.plan.flags)}


def peaks(desc) -> dict:
    """The host's limits for one thread (dispatches are timed on one): the FLOP rate of one core
    and the bandwidths of L2 and DRAM, from the description the cost model uses (calibrated or
    detected: `calibration`)."""
    from ..targets.host import calibration_state

    return {"flops_per_s": desc.peak_flops_f32, "l2_bytes_per_s": desc.l2_bandwidth,
            "dram_bytes_per_s": desc.dram_bandwidth, "l2_bytes": desc.l2_bytes,
            "calibration": calibration_state()}


def dispatch_row(name: str, rounds: int = 3) -> dict:
    """Per kernel name: seconds summed over its executables under each variant (None where one
    failed), the FLOPs and bytes IREE's profile gives them (`work`), and each kernel's roofline
    bound on one core (`bound_s`: its FLOPs at the core's peak or its bytes at the bandwidth of
    where they live, whichever is longer; FLOPs are counted for contractions only, the other
    dispatches are bound by their bytes); the totals of both."""
    from ..backend import profile
    from ..backend.dispatches import time_dispatches
    from ..cost.model import roofline
    from ..targets import get_target

    target = get_target("host")
    variants = programs(name)
    kernels: dict = defaultdict(dict)
    work: dict = defaultdict(dict)
    with tqdm(desc=f"{name} dispatches", unit="kernel", leave=False) as bar:
        for variant, (text, flags) in variants.items():
            for d in time_dispatches(text, target, flags, rounds, progress=bar.update):
                got = kernels[d.kernel].get(variant, 0.0)
                kernels[d.kernel][variant] = None if got is None or d.seconds is None else got + d.seconds
            for d in profile(text, target, flags).dispatches:
                done = work[d.name].setdefault(variant, {"flops": 0.0, "bytes": 0, "bound_s": 0.0})
                done["flops"] += d.flops
                done["bytes"] += d.bytes
                done["bound_s"] += roofline(d.flops, d.bytes, target.desc, 1)
    work = {k: w for k, w in work.items() if k in kernels}  # kernels that were timed
    totals = {v: sum(k.get(v) or 0.0 for k in kernels.values()) for v in variants}
    bounds = {v: sum(w[v]["bound_s"] for w in work.values() if v in w) for v in variants}
    return {"model": name, "kernels": dict(kernels), "total_s": totals, "work": work,
            "bound_s": bounds, "peaks": peaks(target.desc)}


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:9.1f}"


def _of_bound(seconds, bound) -> str:
    return f"{seconds / bound:6.1f}x" if seconds and bound else "      -"


def print_row(row: dict, top: int = 12) -> None:
    kernels, work, p = row["kernels"], row["work"], row["peaks"]
    order = sorted(kernels, key=lambda k: -max(v or 0.0 for v in kernels[k].values()))
    print(f"{row['model']}: us per call, kernel by kernel (one thread), IREE's own compile / "
          f"sft's plan; the roofline bound on one core ({p['flops_per_s'] / 1e9:.0f} GFLOP/s, L2 "
          f"{p['l2_bytes_per_s'] / 1e9:.0f} GB/s, DRAM {p['dram_bytes_per_s'] / 1e9:.0f} GB/s: "
          f"{p['calibration']}) and how far each is from it")
    print(f"  {'kernel':<48} {'IREE':>9} {'sft':>9} {'speedup':>7} {'bound':>9} {'IREE/b':>7} "
          f"{'sft/b':>7} {'sft GF/s':>8}")
    for kernel in order[:top]:
        iree, ours = kernels[kernel].get("iree"), kernels[kernel].get("sft")
        ratio = f"{iree / ours:6.2f}x" if iree and ours else "      -"
        bound = {v: w["bound_s"] for v, w in work.get(kernel, {}).items()}
        flops = work.get(kernel, {}).get("sft", {}).get("flops", 0.0)
        rate = f"{flops / ours / 1e9:8.1f}" if ours and flops else "       -"
        print(f"  {kernel[:48]:<48} {_us(iree)} {_us(ours)} {ratio} {_us(bound.get('sft'))} "
              f"{_of_bound(iree, bound.get('iree'))} {_of_bound(ours, bound.get('sft'))} {rate}")
    total, bounds, rest = row["total_s"], row["bound_s"], len(order) - top
    label = "total" + (f" ({rest} more kernels)" if rest > 0 else "")
    ratio = f"{total['iree'] / total['sft']:6.2f}x" if total["sft"] else ""
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


def dispatches(models: list[str], rounds: int) -> dict:
    rows = []
    for name in models:
        rows.append(dispatch_row(name, rounds))
        print_row(rows[-1])
    return {"rows": rows}
