"""sft-calibrate: measure this host's overheads, bandwidths and FLOP rate for the cost model,
fit its kernel model to measured kernel times (a fixed sample of tile candidates of synthetic
contractions, none of the benchmark suite's), and store both for later searches (about a
minute)."""

from __future__ import annotations

import argparse
import sys
import time

from tqdm import tqdm

from ..calibrate import calibrate, calibration_runs
from ..kernel_fit import FIT_ROUNDS
from ..targets.host import calibration_file
from .opt import run_tool


def main(argv: list[str] | None = None) -> int:
    """sft-calibrate's entry point; bad input or an unwritable output is one error line and exit code 1."""
    return run_tool("sft-calibrate", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="sft-calibrate", description=__doc__)
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds of the host's microbenchmarks (median)")
    p.add_argument("--fit-rounds", type=int, default=FIT_ROUNDS,
                   help="interleaved timing rounds of the kernel fit's candidates (median)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    with tqdm(desc="calibrating", unit="run", total=calibration_runs(args.rounds, args.fit_rounds)) as bar:
        stored = calibrate(args.rounds, progress=bar.update, fit_rounds=args.fit_rounds)
    for key, value in sorted(stored["desc"].items()):
        print(f"{key:<28} {value:.4g}")
    for key, value in sorted(stored["cpu"].items()):
        print(f"cpu.{key:<24} {value:.4g}")
    fit = stored["fit"]
    print(f"kernel fit: {fit['samples']} timed candidates; rms log error {fit['rms_log_error_before']:.3f} "
          f"-> {fit['rms_log_error']:.3f}; pairwise accuracy {fit['pairwise_before']:.3f} -> "
          f"{fit['pairwise']:.3f} (detected defaults -> fitted, on the fit sample)")
    identity = ", ".join(f"{k} {v}" for k, v in sorted(stored["identity"].items()))
    print(f"stored in {calibration_file()} for {identity} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
