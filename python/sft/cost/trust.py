"""How far the cost model's whole-program predictions are trusted on a host: the search takes a
plan over IREE's default only where the model predicts it faster by more than the model's own
measured error on that kind of decision.

A plan departs from IREE's default in kinds of decision (`decision_kinds`): the driver
(local-sync instead of the parallel executor), dispatch formation (aggressive fusion, data
tiling, im2col), micro-kernels, kernel tiles, graph rewrites (parameters held transposed
among them). Each kind has a factor: the predicted speed-up over IREE's default a plan needs
before it is believed. The factors are measured by `sft-bench quality --programs --store`
(per kind, the worst of measured over predicted time, relative to IREE's default, over every
option set of held-out programs) and stored with the host's calibration, each the worst of
the last `KEPT_RUNS` runs stored (`stored_after`); where never measured, `UNMEASURED` holds
them high. The driver is where predictions went most wrong
before: one executor number calibrated on one small matmul sent a 2-core Zen 4 host's programs
to one thread (0.78x IREE's default, geomean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..space.options import FORMATION_FLAGS, UKERNELS

KINDS = ("driver", "formation", "ukernels", "tiles", "rewrites", "split", "weights", "packed")
# Before measurement: a kind of decision whose errors were seen large (the driver, formation:
# up to 1.9x on one program) must predict a large gain; tiles already pass a per-kernel margin
# (targets/cpu.py UNCALIBRATED_MARGIN) and rewrites one of their own (strategy REWRITE_MARGIN).
# A split (parts side by side on threads of their own) is held as high as the driver; its
# batch's and its weights' apart: the batch's parts each read every weight (its error measured
# 1.12-1.25x on the Xeon VM), the weights' parts half of them each, in their own core's cache.
# Packed weights: one measured speed-up for every shape (`TargetDesc.packed_speedup`), where
# shapes measured 1.1-1.45x on the Xeon VM.
UNMEASURED = {"driver": 1.30, "formation": 1.20, "ukernels": 1.20, "tiles": 1.05, "rewrites": 1.03,
              "split": 1.30, "weights": 1.30, "packed": 1.10}
NOISE = 1.03  # a measured factor is never below the run-to-run noise of a program's time
# A stored factor is the worst of this many runs' (the newest included): one run's worst error
# beyond its controls moved 1.0-1.3x between runs an hour apart on a 2-core Zen 4 VM (tiles
# read 1.03, then 1.34), and a 1.03 let a plan predicted 3.1% faster than IREE's default through
# that then measured 1.36x slower (the 256-1024-256 MLP at batch 8, aggressive fusion).
KEPT_RUNS = 3


def decision_kinds(plan) -> tuple[str, ...]:
    """The kinds of decision in which `plan` departs from IREE's default (an empty plan: none)."""
    found = {
        # a batch split runs its parts on one thread each: its driver is the split's own
        "driver": bool(plan.driver) and not (plan.batch_split or plan.weight_split),
        "formation": any(f in FORMATION_FLAGS for f in plan.flags),
        "ukernels": UKERNELS in plan.flags,
        "tiles": bool(plan.tiles or plan.low_precision),
        "rewrites": bool(plan.orient or plan.expand or plan.orders or plan.held),
        "split": bool(plan.batch_split),
        "weights": bool(plan.weight_split),
        "packed": bool(plan.packed),
    }
    return tuple(k for k in KINDS if found[k])


@dataclass(frozen=True)
class Trust:
    """Per kind of decision, the predicted speed-up over IREE's default a plan must show."""

    factors: tuple[tuple[str, float], ...] = tuple(UNMEASURED.items())
    source: str = "not measured on this host (sft-bench quality --programs --store measures it)"

    @classmethod
    def from_stored(cls, stored: dict | None) -> "Trust":
        """The trust a calibration stored ({"factors": {kind: factor}, "source": ...}); kinds it
        has no measurement of keep `UNMEASURED`. None or {}: all unmeasured."""
        if not stored:
            return cls()
        measured = {k: float(v) for k, v in stored.get("factors", {}).items() if k in KINDS}
        if any(not math.isfinite(v) or v < 1.0 for v in measured.values()):
            raise ValueError(f"trust factors must be finite and >= 1, not {measured}")
        return cls(tuple({**UNMEASURED, **measured}.items()), str(stored.get("source", "measured")))

    def required(self, plan) -> float:
        """The predicted speed-up over IREE's default that `plan` needs (1.0: IREE's default)."""
        factors = dict(self.factors)
        return max((factors[k] for k in decision_kinds(plan)), default=1.0)

    def pessimistic(self, plan, predicted: float) -> float:
        """`predicted` seconds as far as they are trusted: scaled by the kinds' factors."""
        return predicted * self.required(plan)

    def takes(self, plan, predicted: float, over: float) -> bool:
        """Whether `plan`, predicted `predicted` seconds, is taken over what is predicted to
        run `over` seconds otherwise (IREE's default, or the whole program's pick): its
        prediction scaled by its kinds' factors still beats it."""
        return self.pessimistic(plan, predicted) < over


def stored_after(stored: dict | None, run: dict) -> dict:
    """The trust to store once a run measured `run` ({"factors": {kind: factor}, "source"}),
    `stored` being what the host had: the last `KEPT_RUNS` runs ("runs", the newest last) and
    per kind the worst of them ("factors"; a kind one run did not measure takes the others')."""
    stored = stored if isinstance(stored, dict) else {}
    previous = stored.get("runs") or ([stored] if stored.get("factors") else [])
    runs = [*(r for r in previous if _readable(r)), run][-KEPT_RUNS:]
    factors: dict[str, float] = {}
    for kept in runs:
        for kind, factor in kept["factors"].items():
            factors[kind] = max(factors.get(kind, factor), factor)
    source = run["source"] if len(runs) == 1 else f"worst of {len(runs)} runs, the last {run['source']}"
    return {"factors": factors, "source": source,
            "runs": [{"factors": r["factors"], "source": r.get("source", "")} for r in runs]}


def _readable(run) -> bool:
    """Whether a stored run reads as factors (a hand-edited file's that do not are dropped)."""
    try:
        Trust.from_stored(run)
        return isinstance(run.get("factors"), dict) and isinstance(run.get("source", ""), str)
    except (ValueError, TypeError, AttributeError):
        return False


def measured_factors(samples: list[tuple]) -> dict[str, float]:
    """Per kind, the factor the samples measured. A sample is (decision kinds of a plan,
    error, noise): its measured time over IREE default's measured time, divided by the same
    ratio of predictions (above 1: slower than the model said), and the spread two processes of
    one module showed on the pair's drivers (0.3: 30%; a 2-tuple: none). The error counts only
    beyond that noise (error / (1 + noise)): a taken worst of raw errors is the executor's
    luck, and grows with the samples (on a 2-core Zen 4 VM the parallel executor's controls
    read 10-35% apart; the driver's worst raw error 1.34-1.98 over four runs of the same
    programs, tiles' 1.29-1.72). A kind takes the worst of the plans that decide it alone, or
    where no plan does, of all the plans that decide it (an error is not pinned on tiles that a
    plan's fusion caused); never below `NOISE`. Kinds no sample has are left out."""
    worst: dict[str, float] = {}
    alone = {sample[0][0] for sample in samples if len(sample[0]) == 1}
    for kinds, error, *noise in samples:
        beyond = error / (1.0 + (noise[0] if noise else 0.0))
        for kind in kinds:
            if kind not in alone or len(kinds) == 1:
                worst[kind] = max(worst.get(kind, NOISE), beyond)
    return worst
