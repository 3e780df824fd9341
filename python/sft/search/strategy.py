"""The search strategy: from a program to the plan it compiles with.

`search_plan` is the outer search over the decisions the kernel search (`exhaustive`) takes as
given: batch expansion and chain orders (each way searched on IREE's own view of the program,
a rewrite kept only where it predicts a clear gain, `REWRITE_MARGIN`), the option sets, the
low-precision twins. `searched_plan` replays a stored search from the tuning database, else
searches (and verifies, with search="verify") and records; `search/compile.py` compiles the
plan.
"""

from __future__ import annotations

import json
import math
import os
import time

from tqdm import tqdm

from ..backend import profile, profiles
from ..backend.farm import connect
from ..cost.trust import decision_kinds
from ..errors import SftError
from ..measure import SEARCH_REVISION, verify
from ..ir import print_module
from ..passes.expand_batch import ExpandBatchPass, expandable
from ..passes.im2col import Im2colPass, filter_gradients
from ..passes.split_reduction import SplitReductionPass, outer_sums
from ..passes.hold_packed import block_of, packed_reads
from ..passes.hold_transposed import HoldTransposedPass, fixed_state, holdable
from ..passes.orient import OrientPass, orientable
from ..passes.low_precision import LOW_PRECISION_TYPES, castable, renumber
from ..passes.reassociate import ReassociatePass
from ..plan import Plan
from ..program import Program, lower, to_sft
from ..space.chains import contraction_chains
from ..space.kernels import contraction_kernels
from ..space.options import DATA_TILING, IM2COL
from ..targets import Target
from ..tuning_db import TuningDB
from ..values import updated_results
from ..passes.split_batch import split_layout, split_of
from .batch_split import (SplitPick, batch_split_of, part_text, shared_seconds, split_floor,
                          split_picks, trusted_split, weight_split_of)
from .candidates import packed_option, plan_of
from .chains import choose_orders, plan_orders
from .exhaustive import SearchReport, search_program


def _profiles(requests: list[tuple[str, tuple[str, ...]]], target: Target) -> list:
    """IREE's profile of each (program text, dispatch-forming flags), side by side on this
    host's cores (`backend.profiles`); None where IREE fails under those flags."""
    return profiles(requests, target, os.cpu_count() or 1)


def iree_view(module, target: Target, options) -> tuple[list, dict]:
    """The contraction kernels of an sft module, and IREE's view of the program (its dispatches
    and default configs) under each set of dispatch-forming flags that `options` use. Consumes
    the module."""
    kernels = contraction_kernels(module)
    default_text = lower(module, Plan(), target)[1]
    flag_sets = sorted({o.formation_flags for o in options})
    found = zip(flag_sets, _profiles([(default_text, f) for f in flag_sets], target))
    return kernels, {flags: p for flags, p in found if p is not None}


REWRITE_MARGIN = 0.03  # a graph rewrite must predict this much gain over the program as written
PRECISIONS = ("f32", *LOW_PRECISION_TYPES)


def check_precision(precision: str, search: str = "model") -> None:
    """An SftError unless `precision` is one the search knows (and one `search` can honour)."""
    if precision not in PRECISIONS:
        raise SftError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, not {precision!r}")
    if precision != "f32" and search == "verify":
        # verify times kernels and programs as the f32 plans measure.py builds: it would drop
        # the low-precision choice without saying so
        raise SftError(f"precision={precision!r} is searched with search='model' only; "
                       "search='verify' does not measure low-precision plans")


def search_plan(sft_text: str, target: Target, precision: str = "f32",
                fixed: tuple[int, ...] = ()) -> tuple[Plan, SearchReport]:
    """The plan the cost model predicts fastest for `target` as far as it trusts itself there
    (`Target.trust`: IREE's default unless a plan's predicted gain exceeds the model's measured
    error on the plan's kinds of decision), and the search's report.

    `precision` "bf16" or "f16" lets each f32 contraction kernel run from inputs rounded to that
    type (f32 accumulation) where the model predicts it faster, casts included; the plan's
    `low_precision` and the report's `chosen` name the ops. "f32" searches as before.

    `fixed`: the arguments a compiled model uploads once and no call replaces (its parameters,
    `passes.hold_transposed.fixed_state`); those read only transposed are searched held so."""
    check_precision(precision)
    options = list(target.options)
    desc = target.desc
    flag_sets = sorted({o.formation_flags for o in options})
    # Orientation and batch expansion change which dispatches IREE forms and what they fuse
    # (batch expansion can bring two contractions next to each other, making a chain), so the
    # program is searched each way, each on IREE's own view of it; it is kept as written unless
    # a rewrite predicts a clear gain. A variant is keyed (oriented ops, expanded ops, held
    # arguments).
    written_module, as_written = to_sft(sft_text), sft_text
    # Filter gradients become matmuls first, in every plan of this search (`Target.
    # im2col_filter_gradients`): every variant below, and the op ids its plans name, start
    # from the rewritten program; IREE's default (`Plan()`) stays the program as written.
    convs = filter_gradients(written_module) if target.im2col_filter_gradients else ()
    if convs:
        Im2colPass(convs)(written_module)
    # then sums over outer dims are split (`Target.split_outer_sums`), as every plan has them
    sums = outer_sums(written_module) if target.split_outer_sums else ()
    if sums:
        SplitReductionPass(sums)(written_module)
    if convs or sums:
        sft_text = print_module(written_module)
    variants, orders, casts = {}, {}, {}
    for rewrite in _rewrites(sft_text, written_module, fixed):
        variant = to_sft(sft_text) if rewrite != WRITTEN else written_module
        HoldTransposedPass(rewrite[2])(variant)
        OrientPass(rewrite[0])(variant)
        ExpandBatchPass(rewrite[1])(variant)
        start = time.perf_counter()
        chains = choose_orders(contraction_chains(variant), target, desc.cores)
        seconds = time.perf_counter() - start
        orders[rewrite] = plan_orders(chains)
        ReassociatePass(orders[rewrite])(variant)
        kernels = contraction_kernels(variant)
        casts[rewrite] = castable(variant) if precision != "f32" else {}
        lowered, planned = lower(variant, Plan(), target)
        # the held weights the rewrite's matmuls could read packed, and those matmuls' op ids
        packed = (packed_reads(lowered, rewrite[2], block_of(desc)[1])
                  if rewrite[2] and target.pack_weights else {})
        variants[rewrite] = (kernels, planned, chains, seconds, packed)
    # IREE's profiles are most of a search's time. A rewrite is first searched under IREE's
    # default dispatch formation only, beside the program as written under every option; it
    # gets the other formations' profiles only when it already predicts a clear gain there.
    default_only = [o for o in options if not o.formation_flags]
    # im2col changes nothing in a program without convolutions: its profiles are taken (and its
    # option sets searched) only where IREE's default view has one
    im2col_sets = [f for f in flag_sets if IM2COL in f]
    # data tiling packs the operands of contractions only: in a program without any, its
    # dispatches are IREE's default ones, and its profiles (and option sets) are skipped
    if not variants[WRITTEN][0]:
        flag_sets = [f for f in flag_sets if DATA_TILING not in f]
    requests = [(WRITTEN, flags) for flags in flag_sets if flags not in im2col_sets]
    requests += [(e, ()) for e in variants if e != WRITTEN]
    profiles = {}
    _take_profiles(requests, variants, target, profiles)

    if profiles[(WRITTEN, ())] is None:  # IREE cannot compile the program as written: say how
        profile(variants[WRITTEN][1], target)
    if any("conv" in d.name for d in profiles[(WRITTEN, ())].dispatches):
        _take_profiles([(WRITTEN, f) for f in im2col_sets], variants, target, profiles)

    def searched(rewrite, opts):
        kernels, _, chains, seconds, packed = variants[rewrite]
        mine = {f: p for (e, f), p in profiles.items() if e == rewrite and p is not None}
        report = search_program(kernels, mine, target, [o for o in opts if o.formation_flags in mine],
                                precision=precision, castable=casts[rewrite])
        report.add_chains(chains, seconds)
        report.packed_reads = packed
        return report

    # Rewrites are compared like for like (`SearchReport.as_formed`).
    reports = {WRITTEN: searched(WRITTEN, options)}
    written = reports[WRITTEN].as_formed
    for rewrite in [e for e in variants if e != WRITTEN and profiles[(e, ())] is not None]:
        reports[rewrite] = searched(rewrite, default_only)
        if reports[rewrite].as_formed < written * (1.0 - REWRITE_MARGIN):
            more = [(rewrite, f) for f in flag_sets if f and f not in im2col_sets]
            _take_profiles(more, variants, target, profiles)
            reports[rewrite] = searched(rewrite, options)
    rewrite = min(reports, key=lambda e: reports[e].as_formed)
    if reports[rewrite].as_formed > written * (1.0 - REWRITE_MARGIN):
        rewrite = WRITTEN
    if convs or sums:  # IREE's default is the program before them: predicted on its own view
        as_is = _default_predicted(as_written, options, target)
        if as_is is not None:  # (where IREE cannot compile it as it is, the rewritten's stands in)
            reports[WRITTEN].default_predicted = as_is
    for r in reports.values():
        r.add_alternatives(reports)
        r.im2col, r.split = convs, sums
    # The model is believed only as far as it was measured right (`Target.trust`): an option
    # set's plan, of the program as written or of any rewrite, is taken only where its
    # predicted time scaled by its kinds' trust factors still beats IREE's default's
    # prediction; of those, the one predicted fastest. (Gating only the rewrite predicted best
    # kept IREE's default on GPT-2 small, its held weights' 1.27x short of the 1.38x rewrites
    # need, where the program as written predicted 1.10x and needed 1.03x: measured 1.11x.
    # Ranking the trusted by their scaled times instead took a JAX MLP step's 3% gain on the
    # parallel executor over its oriented step on one thread, predicted 1.5x: 0.44 ms measured
    # against 1.0-1.5.)
    plans = [(r, option, option_plan(r, option, casts[e]))
             for e, r in reports.items() for option in r.ranked]
    plans += [(r, *twin) for r, option, plan in plans
              if (twin := packed_option(r, option, plan, target))]
    # the least predicted on one thread, packed twins included, priced without column walks:
    # what a split's part could share
    serial = min((o.predicted - r.walk_discount for r, o, _ in plans if o.options.serial),
                 default=math.inf)
    for r in reports.values():
        r.serial_floor = serial
    found = trusted_pick(plans, reports[WRITTEN].default_predicted, target.trust)
    if found is None:
        report = reports[rewrite]  # (verify explores around the rewrite predicted best)
        report.pick_predicted = report.default_predicted
        report.chosen = _distrusted(report, plans, target)
        return Plan(im2col=convs, split=sums, flags=options[0].flags), report
    report, best, plan = found
    report.pick_predicted = best.predicted
    # every decision in words (low precision is never silent: the numbers change)
    words = [best.options.describe(), *plan.describe()]
    if not target.model_times:
        words.insert(1, "IREE's kernel configs (the cost model has no timings for this device)")
    report.chosen = "; ".join(words)
    return plan, report


def _default_predicted(sft_text: str, options: list, target: Target) -> float | None:
    """IREE's default plan's predicted seconds for the program `sft_text` as it is (what
    `Plan()` compiles). Predicted on the program with its filter gradients as matmuls instead,
    a CNN training step's default read 0.70 ms where IREE's convolutions for them took 2.98
    (the other plans, which all have the matmuls, 1.0-1.3)."""
    defaults = [o for o in options if o.is_default]
    kernels, found = iree_view(to_sft(sft_text), target, defaults)
    if not found:  # IREE cannot compile it as it is
        return None
    return search_program(kernels, found, target, defaults).default_predicted


def trusted_pick(plans: list[tuple], default_predicted: float, trust) -> tuple | None:
    """Of (report, ranked option, plan) triples, the one predicted fastest among those whose
    predicted seconds scaled by their kinds' factors (`Trust.pessimistic`) beat IREE's
    default's prediction (IREE's default options themselves, untiled, always count); None
    where none does."""
    trusted = [found for found in plans if found[2] == Plan()
               or trust.takes(found[2], found[1].predicted, default_predicted)]
    return min(trusted, key=lambda found: found[1].predicted, default=None)


def _take_profiles(keys: list, variants: dict, target: Target, profiles: dict) -> None:
    """IREE's profiles of (rewrite, flags) `keys` into `profiles`."""
    profiles.update(zip(keys, _profiles([(variants[e][1], f) for e, f in keys], target)))


WRITTEN = ((), (), ())  # the rewrite key of the program as written: nothing rewritten


def _rewrites(sft_text: str, written_module, fixed: tuple[int, ...]) -> list[tuple]:
    """The (oriented ops, expanded ops, held arguments) variants worth searching: as written,
    expanded, oriented, oriented then expanded (expansion read on the oriented program), and
    with the arguments of `fixed` that only transposes read held transposed."""
    found = [WRITTEN, ((), expandable(written_module), ())]
    orient = orientable(written_module)
    if orient:
        oriented = to_sft(sft_text)
        OrientPass(orient)(oriented)
        found += [(orient, (), ()), (orient, expandable(oriented), ())]
    held = holdable(written_module, fixed)
    if held:
        found.append(((), (), held))
    return list(dict.fromkeys(found))


def option_plan(report: SearchReport, option, casts: dict | None = None) -> Plan:
    """The plan of one ranked option set: its options, the report's rewrites, and where the
    options keep tiles, each kernel's best config and low-precision choice."""
    tiles, low = (), ()
    if option.options.keeps_tiles:
        low = tuple((c.kernel.op_id, c.precision) for c in option.kernels if c.precision != "f32")
        # Tiles name ops after sft-low-precision inserted its casts (one per input cast)
        inserted = {op: len((casts or {})[op]) for op, _ in low}
        tiles = tuple((renumber(c.kernel.op_id, inserted), c.space.config(c.best))
                      for c in option.kernels if c.best != 0)
    return plan_of(report, option.options, tiles, low)


def _distrusted(report: SearchReport, plans: list[tuple], target: Target) -> str:
    """The report's words for keeping IREE's default: the plan that decides something nearest
    to being trusted, its predicted gain and the gain its decisions need. (A plan deciding
    nothing that is not taken predicts no gain: on an AVX2 host whose model kept IREE's tiles
    the words read "deciding ) predicts 1.00x, short of the 1.00x".)"""
    deciding = [found for found in plans if decision_kinds(found[2])]
    if not deciding:
        return "iree-default: no plan the model ranked predicts a gain over IREE's default"
    _, best, plan = min(deciding, key=lambda f: target.trust.pessimistic(f[2], f[1].predicted))
    gain = report.default_predicted / best.predicted if best.predicted > 0 else float("inf")
    return (f"iree-default: the model's pick ({best.options.describe()}, deciding "
            f"{'+'.join(decision_kinds(plan))}) predicts {gain:.2f}x, short of the "
            f"{target.trust.required(plan):.2f}x those decisions need on this host "
            f"(trust {target.trust.source})")


def _db_key(target: Target, precision: str) -> str:
    """The tuning database's target key for a search at `precision`."""
    key = target.key(SEARCH_REVISION)
    # a plan searched with low precision allowed is never an f32 search's
    return key + (f"-{precision}" if precision != "f32" else "")


def split_search(program: Program, target: Target, precision: str = "f32",
                 whole: SearchReport | None = None) -> list[SplitPick]:
    """The splits of `program` (its batch's, its weights'), each part's program searched too:
    their `split_picks`, best predicted first; [] where none is offered.

    `whole`: the whole program's search report, where only a split the trust gate could take
    over its pick is wanted (search="model"): a split whose least possible prediction
    (`split_floor`), scaled by its kind's trust factor, does not beat the pick is not searched.
    The part's search is IREE's profiles over again: GPT-2 small's weight split was 6 of the
    search's 15 iree-compile runs, and predicted 1.76x the pick."""
    if precision != "f32":
        return []
    found = []
    for field, value in (("batch_split", batch_split_of(program, target)),
                         ("weight_split", weight_split_of(program, target))):
        if not value:
            continue
        split = split_of(Plan(**{field: value}))
        layout = split_layout(program.module(), split, updated_results(program.signature))
        shared = shared_seconds(program, split, target)
        if whole and target.trust.pessimistic(Plan(**{field: value}), split_floor(
                whole.serial_floor, value[0], shared, layout)) >= whole.pick_predicted:
            continue
        # join functions take the parameters they read as the user has them
        held = tuple(a for a in fixed_state(program.signature) if a not in layout.join_args)
        part_report = search_plan(part_text(program, split), target, precision, held)[1]
        found += split_picks(part_report, value, option_plan, target, shared, layout, field)
    return sorted(found, key=lambda pick: pick.predicted)


def searched_plan(program: Program, target: Target, search: str,
                  db: TuningDB, precision: str = "f32", farm=None) -> tuple[Plan, SearchReport]:
    """search="model" or "verify": replayed from the tuning database when this program's
    structure was searched before on this target and compiler (and precision), else searched
    (and recorded). verify runs on `farm` (a Ray address or `backend.farm.Farm`; None:
    $SFT_RAY_ADDRESS where set, else here)."""
    check_precision(precision, search)
    tkey = _db_key(target, precision)
    hit = db.lookup_plan(program.workload, tkey, search)
    if hit is not None:
        try:
            stored = json.loads(hit[1])
            report = SearchReport(scored=stored.get("scored", 0),
                                  space_size_log10=stored.get("space_size_log10", 0.0),
                                  measured=stored.get("measured_s", {}),
                                  chosen=stored.get("chosen", ""), replayed=True)
            return Plan.from_json(hit[0]), report
        except (SftError, ValueError, AttributeError):
            pass  # a stored record that no longer reads: search again, and overwrite it
    farm = connect(farm) if search == "verify" else None  # before the search: fail fast
    fixed = fixed_state(program.signature)
    plan, report = search_plan(program.sft_text, target, precision, fixed)
    found = split_search(program, target, precision, report if search == "model" else None)
    extra = {pick.name: (pick.plan, pick.layout) for pick in found}  # the splits verify times
    if found:
        best = trusted_split(target, found, report.pick_predicted)
        if search == "model" and best is not None:
            # the part's search is the report: its op ids (chains, choices) are the plan's
            best.report.chosen = f"{best.words} ({best.predicted * 1e6:.0f} us a call predicted)"
            plan, report = best.plan, best.report
        report.measured["predicted split"] = found[0].predicted  # (a prediction, for the report)
    if search == "verify":
        with tqdm(desc="sft verify", unit="run", leave=False) as bar:
            keep, resident, storage = program.timing_layout(target)
            text_of = lambda p: program.for_iree(  # noqa: E731
                program.linalg if p.as_imported else lower(program.module(), p, target)[1], target)
            plan = verify(report, text_of, target,
                          program.timing_inputs(), db, progress=bar.update,
                          keep=keep, resident=resident, storage=storage, farm=farm,
                          extra=extra)
    db.record_plan(program.workload, tkey, search, plan.to_json(), report.to_json())
    return plan, report
