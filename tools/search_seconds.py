"""Seconds search="model" takes on a bench model, and how many iree-compile runs it makes: the
search alone (no tuning database hit, no profile cached), on this host's calibration and trust
(copied into a fresh cache folder), as a user's first compile runs it. `sft-bench compile` times
the whole compile instead, each variant in a fresh, empty cache (never calibrated).

    .venv/bin/python tools/search_seconds.py [MODEL]   (default gpt2_small)
"""
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(name: str) -> None:
    from sft.backend import iree
    from sft.models import BENCH_SUITE, LARGE_SUITE
    from sft.program import prepare
    from sft.search.strategy import searched_plan
    from sft.targets import get_target
    from sft.tuning_db import TuningDB

    runs = []
    run_compile = iree._run_compile

    def counted(args, timeout=None):
        runs.append(args)
        return run_compile(args, timeout)

    iree._run_compile = counted
    case = {**BENCH_SUITE, **LARGE_SUITE}[name]
    program, _ = prepare(case.build(), case.inputs())
    start = time.perf_counter()
    _, report = searched_plan(program, get_target("host"), "model", TuningDB())
    print(f"{name}: search {time.perf_counter() - start:.2f} s, {len(runs)} iree-compile runs; "
          f"chosen: {report.chosen[:100]}")


if __name__ == "__main__":
    calibration = Path(os.environ.get("SFT_CACHE_DIR") or Path.home() / ".cache" / "sft") / "host-calibration.json"
    with tempfile.TemporaryDirectory(prefix="sft-search-seconds-") as cache:
        if calibration.exists():
            shutil.copy(calibration, cache)
        os.environ["SFT_CACHE_DIR"] = cache
        main(sys.argv[1] if len(sys.argv) > 1 else "gpt2_small")
