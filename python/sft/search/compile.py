"""Compile a prepared program under a plan (given, searched or empty): `compile_program`. Where
a searched plan does not apply or IREE refuses it, the next option sets the model ranked are
tried, then IREE's own choice: a search never makes a program fail.
"""

from __future__ import annotations

import time

from ..backend import compile_module
from ..backend.iree import Artifact
from ..backend.runtime import check_driver
from ..errors import SftError
from ..plan import Plan
from ..program import Program, lower
from ..space.options import FORMATION_FLAGS
from ..targets import Target
from ..tuning_db import TuningDB
from .candidates import plan_of
from .exhaustive import SearchReport
from .strategy import _db_key, check_precision, option_plan, searched_plan


def compile_program(program: Program, module, target: Target, plan: Plan | None = None,
                    search: str = "none", precision: str = "f32", farm=None,
                    ) -> tuple[Plan, SearchReport | None, str, str, Artifact]:
    """Plan (given, searched or empty), lower and compile a prepared program; `module` is its
    raised sft module, consumed. Returns (plan, report, lowered, planned, artifact).
    `precision` and `farm` as in `compile`."""
    if search not in ("none", "model", "verify"):
        raise SftError(f"search must be 'none', 'model' or 'verify', not {search!r}")
    check_precision(precision, search)
    if search == "verify" and plan is None:  # verify times candidates on this machine's device
        check_driver(target.driver)
    report, seconds = None, program.seconds
    start = time.perf_counter()
    if plan is None and search != "none":
        plan, report = searched_plan(program, target, search, TuningDB(), precision, farm)
        seconds["search"] = time.perf_counter() - start
    plan = plan or Plan()
    try:
        lowered, planned, artifact = _lower_and_compile(module, plan, target, seconds, program)
    except SftError as error:
        if report is None:
            raise
        # A searched (or replayed) plan that does not apply or that IREE refuses (aggressive
        # fusion can exceed IREE's stack limit on a training step) is discarded, never fatal:
        # the next option sets the model ranked (`_fallbacks`), then IREE's own choice.
        # last, IREE's default as the search would take it (reductions reassociated), then bare
        defaults = dict.fromkeys([Plan(flags=target.options[0].flags), Plan()])
        for name, fallback in [*_fallbacks(report, plan, target), *(("iree-default", p) for p in defaults)]:
            try:
                lowered, planned, artifact = _lower_and_compile(program.module(), fallback, target,
                                                                seconds, program)
                break
            except SftError:
                if fallback == Plan():
                    raise
        report.fallback = True
        why = error.message.splitlines()[0].split("error: ")[-1]  # not the scratch file's path
        tiles = "" if name.endswith("its tiles") else ", untiled"
        report.chosen = f"{name}{tiles} (the search's pick failed to compile: {why[:160]})"
        plan = fallback
        if search != "none":  # replays take the plan that compiled
            TuningDB().record_plan(program.workload, _db_key(target, precision), search,
                                   plan.to_json(), report.to_json())
    return plan, report, lowered, planned, artifact


def _fallbacks(report: SearchReport, failed: Plan, target: Target, count: int = 4
               ) -> list[tuple[str, Plan]]:
    """(name, plan) to try when `failed` does not compile, best ranked first, each with the
    search's graph rewrites: the failed option set itself untiled where it had tiles, then
    option sets without its dispatch-forming flags (what fails is mostly a dispatch IREE's
    codegen cannot take: aggressive fusion past the stack limit, in every set that has it),
    each with its own searched tiles and then without (a CNN training step whose aggressive
    fusion failed ran untiled where its next option set's tiles were priced). Only option sets
    the trust gate takes over IREE's default (`Target.trust`, each judged as it was ranked:
    with its tiles), and the failed one: a GPT-2 block's training step whose pick failed ran
    the next ranked, untrusted set at 0.68x IREE's default."""
    failed_formation = {f for f in failed.flags if f in FORMATION_FLAGS}
    found = {}
    for option in report.ranked:
        o = option.options
        untiled = failed.tiles and (o.flags, o.driver) == (failed.flags, failed.driver)
        forms_failed = failed_formation <= set(o.formation_flags)  # what failed, maybe more
        f32 = all(c.precision == "f32" for c in option.kernels)  # (casts renumber low-precision ones)
        # the gate judges an option set as it was ranked: its tiles, low precision, prediction
        low = tuple((c.kernel.op_id, c.precision) for c in option.kernels if c.precision != "f32")
        ranked = option_plan(report, option) if f32 else plan_of(report, o, (), low)
        trusted = target.trust.takes(ranked, option.predicted, report.default_predicted)
        if (forms_failed and not untiled) or not (trusted or untiled):
            continue
        tiled = () if untiled or not f32 else ((f"{o.describe()}, its tiles", ranked),)
        for name, plan in (*tiled, (o.describe(), plan_of(report, o))):
            if plan != failed and plan not in found.values():
                found[name] = plan
    return list(found.items())[:count]


def _lower_and_compile(module, plan: Plan, target: Target, seconds: dict, program: Program):
    """Lower `module` under `plan` (or take the front end's linalg for a plan `as_imported`)
    and compile it as `program` is called on `target` (`Program.for_iree`)."""
    start = time.perf_counter()
    imported = program.linalg
    lowered, planned = (imported, imported) if plan.as_imported else lower(module, plan, target)
    planned = program.for_iree(planned, target)
    lowered_at = time.perf_counter()
    artifact = compile_module(planned, target, plan.iree_flags)
    seconds.update({"lower": lowered_at - start, "iree-compile": time.perf_counter() - lowered_at})
    return lowered, planned, artifact
