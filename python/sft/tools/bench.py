"""sft-bench: how fast sft is, and how good its cost model is, measured on this machine.

  sft-bench speed    every benchmark model: PyTorch eager, torch.compile, IREE's defaults on the
                     same torch-mlir import, and sft with search="model" and search="verify";
                     each variant times in a process of its own, taking turns (medians of rounds)
  sft-bench quality  the cost model against measurement on sampled tile candidates of the
                     models' contraction kernels: Spearman, pairwise accuracy, top-1/5 recall;
                     with --programs, on whole programs: every option set the search ranks and
                     IREE's default, compiled and timed whole (models and training steps), and
                     --store keeps the measured error per kind of decision for the trust gate
  sft-bench train    ms per training step (forward, loss, backward, optimizer) under eager,
                     torch.compile, IREE's default on the same joint graph, sft model and verify
  sft-bench compile  compile time, peak memory and IR size of IREE's path and of sft.compile
                     (none, model), each in a fresh process and cache, with numerics vs eager
  sft-bench dispatches  where the time goes: every kernel of IREE's own compile and of sft's
                     plan (search="model") timed where it runs in its program (IREE's profiling,
                     one thread), side by side, with the time between dispatches, beside its
                     roofline bound (FLOPs at the core's peak, bytes at L2 or DRAM bandwidth)
  sft-bench plans    the plan search="model" picks per model and target (--targets), and with
                     --compare OLD.json which differ from those written before (a refactor's check)

Ratios are speed-ups (higher is faster). --json writes every number for tracking.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from tqdm import tqdm

from ..models import BENCH_SUITE, LARGE_SUITE
from .bench_ratios import bound_seconds, of_bound, ratios, summarize
from .opt import run_tool


# Builders run in the timing worker processes: each returns the callable to time.
def _torch(name: str, compiled: bool):
    import torch

    case = BENCH_SUITE[name]
    model, inputs = case.build(), case.inputs()
    model = torch.compile(model) if compiled else model

    def run():
        with torch.no_grad():
            model(*inputs)
    return run


def _iree_default(name: str):
    """IREE alone on torch-mlir's import (the model's state uploaded once, as sft does); `name`
    a model of the speed suite or of the large ones."""
    from ..backend import compile_module, load
    from ..targets import get_target
    from ..program import import_model
    from ..values import to_numpy

    case = {**BENCH_SUITE, **LARGE_SUITE}[name]
    model, inputs = case.build(), case.inputs()
    text, _, _, state = import_model(model, inputs)
    fn = load(compile_module(text, get_target("host")))
    arguments = [fn.upload(to_numpy(v)) for v in state.values()] + [x.numpy() for x in inputs]
    return lambda: fn(*arguments)


def _sft(name: str, search: str):
    from ..api import compile as sft_compile

    case = BENCH_SUITE[name]
    model, inputs = case.build(), case.inputs()
    compiled = sft_compile(model, inputs, search=search)  # replays the parent's search
    arrays = [x.numpy() for x in inputs]
    return lambda: compiled(*arrays)


def _chosen(report: dict) -> str:
    """The verify column's choice; * marks a plan replayed from the tuning database."""
    mark = "*" if report.get("replayed") else ""
    return report["chosen"][:33 - len(mark)] + mark


def speed(models: list[str], rounds: int, calls: int, use_torch_compile: bool) -> dict:
    import torch

    from ..api import compile as sft_compile
    from ..backend.timing import time_in_processes

    rows = []
    header = (f"{'model':<18}{'ok':>3}{'disp':>5}{'space':>7}{'chosen (verify)':>34}{'eager':>8}"
              f"{'t.comp':>8}{'iree':>8}{'model':>8}{'verify':>8}{'verify/iree':>12}"
              f"{'model/iree':>11}{'model/verify':>13}{'verify/torch':>13}{'control':>9}"
              f"{'bound':>8}{'verify/bound':>13}")
    print(header + "\n" + "-" * len(header), flush=True)
    for name in models:
        case = BENCH_SUITE[name]
        model, inputs = case.build(), case.inputs()
        with torch.no_grad():
            expected = model(*inputs).numpy()
        row = {"model": name, "ok": True}
        for mode in ("model", "verify"):
            compiled = sft_compile(model, inputs, search=mode, keep_ir=True)
            row["ok"] &= bool(np.allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5))
            row["bound_s"] = bound_seconds(compiled.stages.linalg)
            row[f"{mode}_plan"] = json.loads(compiled.plan.to_json())
            row[f"{mode}_search"] = compiled.search.to_dict()
            row["dispatches"] = compiled.dispatch_count
        # iree_again: IREE's module once more, in a process of its own. The two IREE columns
        # differ by noise alone; that spread is the row's yardstick for "slower".
        builders = {"eager": (_torch, (name, False)), "iree": (_iree_default, (name,)),
                    "model": (_sft, (name, "model")), "verify": (_sft, (name, "verify")),
                    "iree_again": (_iree_default, (name,))}
        if use_torch_compile:
            builders["torch_compile"] = (_torch, (name, True))
        times, errors = time_in_processes(builders, rounds, calls, timeout=600.0)  # torch.compile warms up slowly
        row.update({f"{k}_s": v for k, v in times.items()}, errors=errors)
        row.update(ratios(times))
        rows.append(row)
        ms = lambda k: f"{row[k + '_s'] * 1e3:8.3f}" if row.get(k + "_s") else f"{'-':>8}"
        space = row["model_search"].get("space_size_log10", 0.0)
        print(f"{name:<18}{'y' if row['ok'] else 'N':>3}{row['dispatches']:>5}{f'1e{space:.1f}':>7}"
              f"{_chosen(row['verify_search']):>34}{ms('eager')}{ms('torch_compile')}{ms('iree')}"
              f"{ms('model')}{ms('verify')}{row['verify_over_iree']:>11.2f}x{row['model_over_iree']:>10.2f}x"
              f"{row['model_over_verify']:>12.2f}x{row['verify_over_best_torch']:>12.2f}x"
              f"{row['control']:>8.2f}x{ms('bound')}{of_bound(times.get('verify'), row['bound_s']):>13}",
              flush=True)
        for variant, err in errors.items():
            print(f"  {variant} failed: {err.strip().splitlines()[-1]}", flush=True)
    summary = summarize(rows)
    summary["verify_never_slower"] = all(r["verify_over_iree"] >= 1.0 for r in rows)
    print("\ngeomean: " + ", ".join(f"{k} {v:.2f}x" for k, v in summary.items() if isinstance(v, float)))
    for search in ("verify", "model"):
        print(f"{search} slower than IREE beyond the control's spread: "
              f"{summary[f'{search}_slower_beyond_noise'] or 'none'}")
    print("columns: ms per call (medians of interleaved rounds, one process per variant); "
          "chosen *: replayed from the tuning database; "
          "verify/torch: speed-up over the faster of eager and torch.compile; control: IREE's "
          "module timed again in another process over the first (1.00x but for noise); bound: "
          "the roofline bound on every core, verify/bound: verify's time over it")
    return {"rows": rows, "summary": summary}


def quality(models: list[str], kernels: int, candidates: int, rounds: int, seed: int = 0) -> dict:
    """The cost model against measurement on the suite's contraction kernels, held out from the
    calibration's fit (whose kernels are synthetic: a suite kernel of a fit kernel's shape and
    layout is left out, and the output says so)."""
    from ..api import linalg_of
    from ..program import to_sft
    from ..search.strategy import iree_view
    from ..kernel_fit import FIT_KERNELS
    from ..measure import measure_candidates
    from ..search.exhaustive import as_compiled
    from ..space.options import ModuleOptions
    from ..quality import KernelQuality, sample_candidates, summarize
    from ..targets import get_target
    from ..targets.host import calibration_state
    from ..tuning_db import TuningDB

    target, db = get_target("host"), TuningDB()
    fitted = {(k.domain, k.roles, k.maps) for k in FIT_KERNELS}
    unique, seen_in_fit = {}, []
    for name in models:
        case = BENCH_SUITE[name]
        module = to_sft(linalg_of(case.build(), case.inputs())[0])
        found, profiles = iree_view(module, target, [ModuleOptions()])
        for k, default in zip(*as_compiled(found, profiles[()], target)):
            if (k.domain, k.roles, k.maps) in fitted:
                seen_in_fit.append(k)
                continue
            unique.setdefault(k.key(), (k, default))
    results = []
    for kernel, default in tqdm(list(unique.values())[:kernels], desc="kernels", unit="kernel"):
        space, indices, predicted = sample_candidates(kernel, target, default, candidates, seed=seed)
        measured = measure_candidates(kernel, space, indices, target, db,
                                      dict(zip(indices, predicted)), rounds=rounds)
        keep = [i for i, idx in enumerate(indices) if measured.get(idx) is not None]
        results.append(KernelQuality(kernel, [indices[i] for i in keep], [predicted[i] for i in keep],
                                     [measured[indices[i]] for i in keep]))
    summary = summarize(results)
    state = calibration_state()
    summary["model"] = state
    summary["held_out"] = not seen_in_fit
    print(f"host {target.desc.name} ({target.about}); model: {state}; kernels held out from the "
          f"calibration fit: {'all' if not seen_in_fit else f'all but {len(seen_in_fit)} left out'}")
    for r in results:
        good, total = r.pairs()
        print(f"  {'x'.join(map(str, r.kernel.domain)):<16}{''.join(r.kernel.roles):<6}"
              f"{'B^T' if r.kernel.b_transposed else '':<4}"
              f"n={len(r.indices):<3} spearman {r.spearman():5.2f}  pairs {good}/{total}  "
              f"regret {r.regret():.2f}x  vs IREE default {r.versus_default():.2f}x")
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    return {"summary": summary, "kernels": [
        {"domain": r.kernel.domain, "roles": r.kernel.roles, "maps": r.kernel.maps, "indices": r.indices,
         "predicted_s": r.predicted, "measured_s": r.measured} for r in results]}


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for k in result["kernels"]:
        ax.scatter(np.array(k["predicted_s"]) * 1e6, np.array(k["measured_s"]) * 1e6, s=10,
                   label="x".join(map(str, k["domain"])))
    ax.set(xscale="log", yscale="log", xlabel="predicted us", ylabel="measured us",
           title="sft cost model: predicted vs measured kernel time")
    ax.legend(fontsize=5, ncol=2)
    fig.savefig(path, dpi=150, bbox_inches="tight")


def main(argv: list[str] | None = None) -> int:
    """sft-bench's entry point; bad input or an unwritable output is one error line and exit code 1."""
    return run_tool("sft-bench", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="sft-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("speed", "quality", "compile", "train", "dispatches", "plans"),
                   help="speed: time per call; quality: the cost model against measurement; "
                        "compile: compile time and peak memory (default models: the large ones); "
                        "train: time per training step; dispatches: time per kernel (any model "
                        "of speed or train)")
    p.add_argument("models", nargs="*", help=f"models (default: all of {', '.join(BENCH_SUITE)})")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median)")
    p.add_argument("--calls", type=int, default=50, help="calls per round (speed, train, dispatches)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (speed)")
    p.add_argument("--processes", type=int, default=1,
                   help="train, quality --programs: processes per variant, the median of theirs "
                        "(a process's luck with IREE's executor lasts its life: 3 outvote one "
                        "unlucky process)")
    p.add_argument("--kernels", type=int, default=16, help="kernels to sample (quality)")
    p.add_argument("--candidates", type=int, default=20, help="candidates per kernel (quality)")
    p.add_argument("--seed", type=int, default=0, help="candidate sampling seed (quality)")
    p.add_argument("--programs", action="store_true",
                   help="quality: whole programs (option sets) instead of kernels (tiles)")
    p.add_argument("--store", action="store_true",
                   help="quality --programs: store the measured trust factors for this host "
                        "(each the worst of the last three runs stored)")
    p.add_argument("--targets", default="host", help="comma-separated targets (plans)")
    p.add_argument("--compare", metavar="JSON", help="plans: a file an earlier run wrote with --json")
    p.add_argument("--json", metavar="FILE", help="write every number as JSON")
    p.add_argument("--plot", metavar="PNG", help="quality: draw predicted vs measured; dispatches: "
                                                 "the roofline with every kernel on it")
    args = p.parse_intermixed_args(argv)  # models may follow the options
    from .bench_train import TRAIN_SUITE

    if args.processes < 1:
        p.error(f"--processes must be at least 1, not {args.processes}")
    if args.programs and args.mode != "quality":
        p.error("--programs goes with quality")
    if args.store and not args.programs:
        p.error("--store goes with quality --programs")
    whole = args.mode == "dispatches" or (args.mode == "quality" and args.programs)
    known = {**BENCH_SUITE, **LARGE_SUITE, **TRAIN_SUITE} if whole else \
        {"train": TRAIN_SUITE}.get(args.mode, {**BENCH_SUITE, **LARGE_SUITE})
    unknown = [m for m in args.models if m not in known]
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {', '.join(known)}")
    from .bench_quality_programs import DEFAULT_PROGRAMS, program_quality

    default = {"compile": LARGE_SUITE, "train": TRAIN_SUITE}.get(args.mode, BENCH_SUITE)
    default = DEFAULT_PROGRAMS if args.mode == "quality" and args.programs else default
    models = args.models or list(default)
    if args.mode == "train":
        from .bench_train import train

        result = train(models, args.rounds, args.calls, not args.no_torch_compile, args.processes)
    elif args.mode == "compile":
        from .compile_cost import run as compile_cost

        result = {"rows": compile_cost(models)}
    elif args.mode == "dispatches":
        from .bench_dispatches import dispatches

        result = dispatches(models, max(3, args.rounds // 2), max(args.calls, 10))
        if args.plot:
            from .bench_dispatches import plot_roofline

            plot_roofline(result, args.plot)
    elif args.mode == "plans":
        from ..targets import get_target
        from .bench_plans import plans

        targets = [t for t in args.targets.split(",") if t]
        for t in targets:
            get_target(t)  # an unknown name is one error line before any search
        result = plans(models, targets, args.compare)
    elif args.mode == "speed":
        result = speed(models, args.rounds, args.calls, not args.no_torch_compile)
    elif args.programs:
        result = program_quality(models, max(3, args.rounds // 2), min(args.calls, 20), args.store,
                                 args.processes)
    else:
        result = quality(models, args.kernels, args.candidates, max(3, args.rounds // 2), args.seed)
        if args.plot:
            plot(result, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 1 if result.get("differ") else 0  # plans --compare: the check failed


if __name__ == "__main__":
    sys.exit(main())
