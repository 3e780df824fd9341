"""sft-calibrate: measure this host's overheads, bandwidths and FLOP rate for the cost model
(short IREE microbenchmarks, about a minute) and store them for later searches."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from ..calibrate import calibrate
from ..targets.host import calibration_file
from .opt import run_tool


def main(argv: list[str] | None = None) -> int:
    """sft-calibrate's entry point; bad input or an unwritable output is one error line and exit code 1."""
    return run_tool("sft-calibrate", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="sft-calibrate", description=__doc__)
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median)")
    args = p.parse_args(argv)
    with tqdm(desc="calibrating", unit="run") as bar:
        measured = calibrate(args.rounds, progress=bar.update)
    for key, value in sorted(measured.items()):
        print(f"{key:<28} {value:.4g}")
    print(f"stored in {calibration_file()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
