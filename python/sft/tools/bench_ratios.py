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
    """The speed-ups a row reports, from its variants' median seconds (nan where one failed);
    `control`: IREE's module timed again in a process of its own ("iree_again") over the first,
    1.00x but for noise: the row's yardstick for "slower" (`slower_beyond_noise`)."""
    ratio = lambda a, b: (times[b] / times[a]) if times.get(a) and times.get(b) else float("nan")
    torch_times = [t for t in (times.get("eager"), times.get("torch_compile")) if t]
    return {"verify_over_iree": ratio("verify", "iree"), "model_over_iree": ratio("model", "iree"),
            "model_over_verify": ratio("model", "verify"),
            "verify_over_best_torch": (min(torch_times) / times["verify"])
            if torch_times and times.get("verify") else float("nan"),
            "control": ratio("iree_again", "iree")}


def summarize(rows: list[dict]) -> dict:
    """Geomeans of the rows' speed-ups, and for each search the rows slower than IREE's default
    beyond their control's spread (`<search>_slower_beyond_noise`)."""
    summary = {key: geomean([r[key] for r in rows]) for key in RATIOS}
    for search in ("verify", "model"):
        summary[f"{search}_slower_beyond_noise"] = slower_beyond_noise(rows, search)
    return summary


def slower_beyond_noise(rows: list[dict], search: str) -> list[str]:
    """The rows where `search` is further below IREE's default than the identical module's
    control strays either way (a row without a control counts as slower where below 1)."""
    def beyond(row):
        control = row.get("control", float("nan"))
        spread = min(control, 1 / control) if math.isfinite(control) and control > 0 else 1.0
        return row[f"{search}_over_iree"] < spread
    return [r["model"] for r in rows if beyond(r)]


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
