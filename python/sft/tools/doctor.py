"""sft doctor: time short IREE microbenchmarks on each visible device and compare them with what
the cost model predicts from the device's description (the host's calibrated numbers, or its
detected defaults where `sft calibrate` never ran). A check is slow when its time exceeds the
prediction by more than --threshold; a device with a slow check is flagged."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from ..doctor import ROUNDS, THRESHOLD, check_arguments, probe_runs, run_doctor
from ..errors import SftError
from .opt import run_tool, write_output

EPILOG = """exit status: 0 every device healthy (or not checked), 2 a device is slower than
predicted, 1 an error (bad arguments, a benchmark that did not run, an unwritable --json)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 on bad usage; here 2 means "a device is flagged"
        raise SftError(message)


def main(argv: list[str] | None = None) -> int:
    """sft doctor's entry point: 0 healthy, 2 a device flagged, 1 (one line on stderr) an error."""
    return run_tool("sft doctor", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = _Parser(prog="sft doctor", description=__doc__, epilog=EPILOG)
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-': stdout)")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"flag a check slower than this factor over its prediction (default {THRESHOLD:g})")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help=f"interleaved timing rounds; the fastest counts (default {ROUNDS})")
    args = p.parse_args(argv)
    check_arguments(args.rounds, args.threshold)  # before the progress bar starts
    with tqdm(total=probe_runs(args.rounds), desc="sft doctor", unit="run", file=sys.stderr) as bar:
        report = run_doctor(args.rounds, args.threshold, progress=bar.update)
    print(report.to_text())
    if args.json:
        write_output(args.json, report.to_json() + "\n")
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
