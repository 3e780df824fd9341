"""sft-bench quality --programs: the cost model against measurement on whole programs.

Per program (a suite model or a training step), every option set the search ranks (driver x
flags x fusion, each with the kernel tiles the model picks under it) and IREE's default are
compiled whole and timed side by side, as the compiled object calls them (interleaved rounds,
one process per variant, medians). Scored: pairwise accuracy of the predicted order, the regret
of the model's raw pick, and the search's actual choice (after the trust gate, cost/trust.py)
against IREE's default. Each option set's error relative to IREE's default (measured ratio over
predicted ratio) is what the trust gate needs: `--store` writes the worst error per kind of
decision into this host's calibration (the worst of the last `KEPT_RUNS` runs stored), and
searches from then on hold picks to it.
"""

from __future__ import annotations

import math
import time

import numpy as np
from tqdm import tqdm

# A handful of programs of every kind the search meets: inference (MLP, attention, a block)
# and training steps (torch and JAX), none in the calibration's fit and none a default row of
# `sft-bench train`, so that the trust measured here is checked on programs it never saw.
DEFAULT_PROGRAMS = ("mlp", "transformer_layer", "linear_attention", "mlp_b8", "jax_mlp_b8")
CONTROL = "control: "  # a variant timed twice, as two processes: the noise of its driver


def program_of(name: str):
    """The prepared `Program` of a suite model or training step (sft-bench train's names; a
    name both suites have, such as gpt2_block, is the training step, as in `dispatches`)."""
    from ..models import BENCH_SUITE, LARGE_SUITE
    from ..program import prepare, program_from
    from .bench_train import JAX_TRAIN_SUITE, TORCH_TRAIN_SUITE

    if name in JAX_TRAIN_SUITE:
        from .bench_train_jax import step_of

        step, args = step_of(JAX_TRAIN_SUITE[name])
        return prepare(step, args, donate_argnums=(0, 1))[0]
    if name in TORCH_TRAIN_SUITE:
        from ..importers.torch_train import trace_train_step

        case = TORCH_TRAIN_SUITE[name]
        model = case.build()
        graph = trace_train_step(model, case.loss, case.optimizer(model.parameters()), case.batch())
        return program_from(graph.linalg, f"{name}.train_step", graph.signature, graph.state)[0]
    case = {**BENCH_SUITE, **LARGE_SUITE}[name]
    return prepare(case.build(), case.inputs())[0]


def program_row(name: str, rounds: int, calls: int, processes: int = 1) -> dict:
    """Every ranked option set of one program and IREE's default: predicted and measured, each
    in `processes` processes of its own (the median of theirs)."""
    from ..backend import compile_module
    from ..backend.timing import loaded_call, time_in_processes
    from ..cost.trust import decision_kinds
    from ..errors import SftError
    from ..measure import module_key
    from ..passes.hold_transposed import fixed_state, holding
    from ..passes.split_batch import split_of
    from ..plan import Plan
    from ..program import lower
    from ..quality import NOISE, ordered_pairs
    from ..search.batch_split import trusted_split
    from ..search.candidates import packed_option
    from ..search.strategy import option_plan, search_plan, split_search
    from ..targets import get_target

    target = get_target("host")
    program = program_of(name)
    chosen, report = search_plan(program.sft_text, target, fixed=fixed_state(program.signature))
    variants = {"iree-default": (Plan(), report.default_predicted)}
    for option in report.ranked:
        plan = option_plan(report, option)
        if plan != Plan():  # IREE's default options with no tiles: the default itself
            variants[option.options.describe()] = (plan, option.predicted)
        twin = packed_option(report, option, plan, target)  # its weights packed, where priced
        if twin is not None:
            variants[f"{option.options.describe()}, packed"] = (twin[1], twin[0].predicted)
    whole, chosen_words = chosen, report.chosen
    found = split_search(program, target)
    splits = {pick.name: (pick.plan, pick.predicted) for pick in found}
    layouts = {pick.name: pick.layout for pick in found}
    variants.update(splits)
    taken = trusted_split(target, found, report.pick_predicted)
    if taken is not None:
        chosen, chosen_words = taken.plan, taken.words  # search="model" takes the split
    if all(plan != chosen for plan, _ in variants.values()):  # IREE's default options, one flag on
        variants["the search's choice"] = (chosen, report.pick_predicted)
    keep, resident, storage = program.timing_layout(target)
    inputs, builders, failed = program.timing_inputs(), {}, []
    # Option sets that change nothing in this program (aggressive fusion where nothing more
    # fuses) compile to the same module: it is timed once, and a pair of them orders nothing.
    same, first_of = {}, {}  # a variant -> the one timed in its place; module key -> that one

    def compiled(plan):
        return compile_module(program.for_iree(lower(program.module(), plan, target)[1], target),
                              target, plan.iree_flags)

    for vname, (plan, _) in tqdm(variants.items(), desc=f"compile {name}", unit="plan", leave=False):
        try:
            artifact = compiled(plan)
        except SftError:  # IREE refuses this option set on this program (aggressive fusion)
            failed.append(vname)
            continue
        parts = (split_of(plan), layouts.get(vname)) if split_of(plan) else ((), None)
        held = holding(plan)
        if not parts[0]:
            key = module_key(artifact.vmfb, plan)
            if key in first_of:
                same[vname] = first_of[key]
                continue
            first_of[key] = vname
        builders[vname] = (loaded_call, (artifact, plan.driver, inputs, keep, resident, storage,
                                         *parts, program.entry, held))
    # The first variant on each driver again, in processes of its own: that driver's noise
    # floor (on a 2-core VM the parallel executor's times differ between processes far more
    # than the inline driver's).
    controls = {}  # driver -> (its first variant, the control's name)
    for vname in list(builders):
        driver = variants[vname][0].driver
        controls.setdefault(driver, (vname, CONTROL + (driver or "parallel")))
    for vname, control in controls.values():
        builders[control] = builders[vname]
    seconds_of, errors_of = time_in_processes(builders, rounds, calls, processes=processes)
    measured = {k: s for k, s in seconds_of.items() if s is not None}
    noise = {}
    for driver, (vname, control) in controls.items():
        builders.pop(control)
        again = measured.pop(control, None)
        if again and vname in measured:
            noise[driver] = abs(again - measured[vname]) / min(again, measured[vname])
    failed += [k for k in builders if k not in measured]
    measured.update({twin: measured[first] for twin, first in same.items() if first in measured})
    if "iree-default" not in measured:
        raise SftError(f"{name}: IREE's default plan could not be timed ({errors_of.get('iree-default')})")
    names = list(measured)
    predicted = [variants[n][1] for n in names]
    seconds = [measured[n] for n in names]
    raw_pick = names[int(np.argmin(predicted))]
    pick = next((n for n in names if variants[n][0] == chosen), None)
    default_p, default_m = report.default_predicted, measured["iree-default"]
    # Two processes of one module differ by the control's spread: pairs closer than that (the
    # larger of the two variants' drivers') are not ordered by the measurement, and a pick is
    # slower than the default only beyond it. A driver whose control failed orders nothing.
    spread_of = {n: max(NOISE, noise.get(variants[n][0].driver, 1.0)) for n in names}
    # each error carries its pair's spread, which the trust factors discount (one whose control
    # failed counts whole: a missing measurement never makes the model more trusted)
    pair_noise = lambda a, b: max(noise.get(variants[a][0].driver, 0.0),  # noqa: E731
                                  noise.get(variants[b][0].driver, 0.0))
    errors = [(decision_kinds(variants[n][0]), (measured[n] / default_m) / (variants[n][1] / default_p),
               pair_noise(n, "iree-default"))
              for n in names if n != "iree-default" and n not in splits]
    # a split is weighed against the whole program's pick (`trusted_split`): its error is
    # measured against that pick's, the part's own decisions (tiles, rewrites) on both sides
    base = next((n for n in names if n not in splits and variants[n][0] == whole),
                "iree-default")  # (where the gate kept IREE's default, the pick is the default)
    if base in measured:
        kind = lambda plan: ("weights",) if plan.weight_split else ("split",)  # noqa: E731
        errors += [(kind(variants[n][0]), (measured[n] / measured[base]) / (variants[n][1] / report.pick_predicted),
                    pair_noise(n, base))
                   for n in names if n in splits]
    spread = [spread_of[n] for n in names]
    good, total = ordered_pairs(predicted, seconds)
    beyond = ordered_pairs(predicted, seconds, spread)
    limit = max(spread[names.index("iree-default")], spread[names.index(pick)] if pick else 0.0)
    return {"program": name, "predicted_s": dict(zip(names, predicted)), "measured_s": measured,
            "failed": failed, "same_module": same, "pairs": [good, total],
            "pairs_beyond_control": list(beyond),
            "control_noise": {d or "parallel": v for d, v in noise.items()},
            "raw_pick": raw_pick, "pick": pick, "splits": sorted({f"{p.plan.describe()[0]}" for p in found}),
            "pick_slower_beyond_control": bool(pick) and measured[pick] > (1 + limit) * default_m,
            "chosen": chosen_words, "regret": measured[raw_pick] / min(seconds),
            "raw_pick_over_default": measured[raw_pick] / default_m,
            "pick_over_default": (measured[pick] / default_m) if pick else float("nan"),
            "errors": errors}


def program_quality(models: list[str], rounds: int, calls: int, store: bool = False,
                    processes: int = 1) -> dict:
    """`program_row` of each model, the summary, and with `store` the measured trust factors
    written into this host's calibration."""
    from ..cost.trust import measured_factors
    from ..targets import get_target
    from ..targets.host import calibration_state, store_trust

    target = get_target("host")
    print(f"host {target.desc.name} ({target.about}); model: {calibration_state()}; "
          f"trust: {target.trust.source}")
    print(f"{'program':<20}{'plans':>6}{'pairs':>9}{'noise t/s':>10}{'>noise':>8}{'regret':>8}"
          f"{'raw pick/iree':>15}{'pick/iree':>11}  chosen")
    rows = []
    for name in models:
        row = program_row(name, rounds, calls, processes)
        rows.append(row)
        good, total = row["pairs"]
        good_n, total_n = row["pairs_beyond_control"]
        spread = "/".join(f"{row['control_noise'].get(d, math.nan):.0%}" for d in ("parallel", "local-sync"))
        print(f"{name:<20}{len(row['measured_s']):>6}{f'{good}/{total}':>9}"
              f"{spread:>9}{f'{good_n}/{total_n}':>8}{row['regret']:>7.2f}x"
              f"{row['raw_pick_over_default']:>14.2f}x{row['pick_over_default']:>10.2f}x  "
              f"{row['chosen'][:70]}", flush=True)
        for kinds, error, noise in sorted(row["errors"], key=lambda e: -e[1])[:3]:
            print(f"    worst: {'+'.join(kinds) or '-':<32} measured/predicted vs IREE {error:.2f}x "
                  f"(noise {noise:.0%})")
    good = sum(r["pairs"][0] for r in rows)
    total = sum(r["pairs"][1] for r in rows)
    good_n = sum(r["pairs_beyond_control"][0] for r in rows)
    total_n = sum(r["pairs_beyond_control"][1] for r in rows)
    geo = lambda xs: float(math.exp(np.mean(np.log(xs)))) if xs else float("nan")  # noqa: E731
    picks = [r["pick_over_default"] for r in rows if math.isfinite(r["pick_over_default"])]
    factors = measured_factors([e for r in rows for e in r["errors"]])
    summary = {"pairwise": good / total if total else float("nan"),
               "pairwise_beyond_control": good_n / total_n if total_n else float("nan"),
               # the search's choice slower than IREE's default by more than that program's noise
               "picks_slower_beyond_control": sum(r["pick_slower_beyond_control"] for r in rows),
               "regret_geomean": geo([r["regret"] for r in rows]),
               "regret_max": max((r["regret"] for r in rows), default=float("nan")),
               "pick_over_default_geomean": geo(picks),
               "pick_over_default_max": max(picks, default=float("nan")),
               "model": calibration_state(), "trust_factors": factors}
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    print("pick/iree: measured time of the search's choice (after the trust gate) over IREE's "
          "default (below 1: faster); raw pick: the model's best predicted, ungated")
    if store:
        source = f"measured {time.strftime('%Y-%m-%d')} on {', '.join(models)}"
        stored = store_trust({"factors": factors, "source": source})
        print(f"trust factors stored for this host ({stored['source']}): "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(stored["factors"].items()))
              + "; searches from now on use them")
    return {"rows": rows, "summary": summary}
