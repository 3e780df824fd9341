"""Compile a random program under a plan, run it, and say what went wrong, if anything.

The rule for what counts (`Outcome.kind`):

- "ok": compiled, ran, and every output is within the error bound of the numpy reference.
- "skipped": the plan's fault, not sft's: an `IllegalPlan` for a plan holding a fusion group
  (the fuzzer draws groups outside the search space, and non-convex ones are illegal by design).
- "plan-illegal": an `IllegalPlan` for a plan drawn wholly from the search space: the space
  offered a decision the passes refuse, so one of the two is wrong.
- "reject": an `SftError` although the default plan fails the same way: sft (or IREE on what sft
  lowered) refuses a well-typed program.
- "plan-compile": an `SftError` (iree-compile failed, mostly) under the plan while the default
  plan compiles: a legal plan IREE cannot compile.
- "group-refused": iree-compile fails under a plan with a fusion group and compiles without the
  group: IREE cannot compile the dispatch region the group formed. Groups are outside the
  search space, so this is reported, not failed.
- "crash": any other exception from sft, drawing the plan included.
- "run": the module compiled but failed when called.
- "wrong": wrong numbers (or shapes).

`draw_and_run` gives about a third of the programs to sft as linalg (sft-lower's output, raised
again by sft.compile), marking their details "[via linalg]"; `run_search` compiles with
search="model" instead of a drawn plan ("[search]").
"""

from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass

from .. import api
from ..errors import IllegalPlan, SftError
from ..plan import Plan
from ..program import to_sft
from ..targets import Target
from .programs import Program

FAILURES = ("crash", "reject", "plan-illegal", "plan-compile", "run", "wrong")


@dataclass(frozen=True)
class Outcome:
    kind: str          # "ok", "skipped", "group-refused" or one of FAILURES
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def _crash(exc: BaseException) -> Outcome:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return Outcome("crash", f"{type(exc).__name__}: {exc}\n" + "".join(lines[-8:]))


def run(program: Program, plan: Plan, target: Target) -> Outcome:
    """Compile `program` under `plan`, call it on its inputs and compare with the reference."""
    try:
        compiled = api.compile(program.text, target=target, plan=plan)
    except IllegalPlan as exc:
        return Outcome("skipped" if plan.groups else "plan-illegal", str(exc))
    except SftError as exc:
        if plan.is_empty:
            return Outcome("reject", str(exc))
        try:
            api.compile(program.text, target=target)
        except SftError as default_exc:
            return Outcome("reject", f"{default_exc} (and under the plan: {exc})")
        except Exception as default_exc:  # noqa: BLE001 - the crash is the finding
            return _crash(default_exc)
        if plan.groups:
            try:
                api.compile(program.text, target=target, plan=dataclasses.replace(plan, groups=()))
            except SftError:
                return Outcome("plan-compile", str(exc))
            except Exception as plain_exc:  # noqa: BLE001
                return _crash(plain_exc)
            return Outcome("group-refused", str(exc))
        return Outcome("plan-compile", str(exc))
    except Exception as exc:  # noqa: BLE001 - the crash is the finding
        return _crash(exc)
    try:
        outputs = compiled(*program.inputs)
    except Exception as exc:  # noqa: BLE001
        return Outcome("run", f"{type(exc).__name__}: {exc}")
    problem = program.compare(outputs)
    return Outcome("wrong", problem) if problem else Outcome("ok")


def run_search(program: Program, target: Target) -> tuple[Plan, Outcome]:
    """Compile `program` with search="model" (the cost model's plan; sft falls back to the
    empty plan when that plan fails to apply or compile), run and compare. Any SftError is a
    "reject" here: the search must never make a program that compiles fail."""
    try:
        compiled = api.compile(program.text, target=target, search="model")
    except SftError as exc:
        return Plan(), Outcome("reject", f"[search] {exc}")
    except Exception as exc:  # noqa: BLE001 - the crash is the finding
        return Plan(), Outcome("crash", "[search] " + _crash(exc).detail)
    try:
        outputs = compiled(*program.inputs)
    except Exception as exc:  # noqa: BLE001
        return compiled.plan, Outcome("run", f"[search] {type(exc).__name__}: {exc}")
    problem = program.compare(outputs)
    return compiled.plan, Outcome("wrong", f"[search] {problem}") if problem else Outcome("ok")


P_LINALG = 0.3  # how often a program goes in as the linalg sft-lower makes of it


def as_linalg(program: Program) -> Program:
    """The program as linalg (sft-lower's output, without a plan), for `sft.compile` to raise
    again: the same numbers must come out, which puts sft-raise under test too."""
    from .. import ir
    from ..passes import LowerPass

    module = to_sft(program.text)
    LowerPass()(module)
    return dataclasses.replace(program, text=ir.print_module(module))


def draw_and_run(program: Program, ch, target: Target,
                 all_kernels: bool = False) -> tuple[Plan, Outcome]:
    """Draw a plan for `program` from `ch` and run it, sometimes (P_LINALG) on the program
    lowered to linalg; a crash while lowering or drawing (sft's space and passes run there) is
    a "crash" outcome, with the empty plan. Details start with "[via linalg]" when it was."""
    if not ch.flag(P_LINALG):
        return _draw_and_run(program, ch, target, all_kernels)
    try:
        program = as_linalg(program)
    except Exception as exc:  # noqa: BLE001 - the crash is the finding
        return Plan(), Outcome("crash", "[via linalg] lowering: " + _crash(exc).detail)
    plan, outcome = _draw_and_run(program, ch, target, all_kernels)
    return plan, dataclasses.replace(outcome, detail="[via linalg] " + outcome.detail)


def _draw_and_run(program, ch, target, all_kernels) -> tuple[Plan, Outcome]:
    from .plans import draw_plan

    try:
        plan = draw_plan(program.text, ch, target, all_kernels)
    except Exception as exc:  # noqa: BLE001 - the crash is the finding
        return Plan(), Outcome("crash", "drawing the plan: " + _crash(exc).detail)
    return plan, run(program, plan, target)
