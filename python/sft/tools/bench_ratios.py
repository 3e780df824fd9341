"""The speed-up ratios every benchmark table reports, their geometric means and the roofline
bound column (one home, so that `sft-bench speed`, `train` and the JAX rows compute them
alike)."""

from __future__ import annotations

import math


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


RATIOS = ("verify_over_iree", "model_over_iree", "model_over_verify", "verify_over_best_torch")


def ratios(times: dict) -> dict:
    """The speed-ups a row reports, from its variants' median seconds (nan where one failed)."""
    ratio = lambda a, b: (times[b] / times[a]) if times.get(a) and times.get(b) else float("nan")
    torch_times = [t for t in (times.get("eager"), times.get("torch_compile")) if t]
    return {"verify_over_iree": ratio("verify", "iree"), "model_over_iree": ratio("model", "iree"),
            "model_over_verify": ratio("model", "verify"),
            "verify_over_best_torch": (min(torch_times) / times["verify"])
            if torch_times and times.get("verify") else float("nan")}


def summarize(rows: list[dict]) -> dict:
    return {key: geomean([r[key] for r in rows]) for key in RATIOS}


def bound_seconds(linalg: str) -> float:
    """The roofline bound of a program on every core of the host (`cost.model.program_bound`
    over IREE's default dispatches of `linalg`): the "bound" column of every table."""
    from ..backend import profile
    from ..cost.model import program_bound
    from ..targets import get_target

    target = get_target("host")
    return program_bound(profile(linalg, target), target.desc, target.desc.cores)


def of_bound(seconds, bound) -> str:
    """`seconds` as a multiple of `bound` ("-" where either is missing)."""
    return f"{seconds / bound:.1f}x" if seconds and bound else "-"
