"""sft doctor: time short IREE microbenchmarks on each visible device and compare them with what
the cost model predicts from the device's description (the host's calibrated numbers, or its
detected defaults where `sft calibrate` never ran). A check is slow when its time exceeds the
prediction by more than --threshold; a device with a slow check is flagged.

With --distributed it runs on every rank of a torchrun launch (`torchrun --nproc-per-node N
-m sft.tools.doctor --distributed`, or `torchrun --nproc-per-node N --no-python sft doctor
--distributed`, on every machine): the ranks time the probes at once, and a rank whose check
takes more than --threshold times both its peers' median and the model's prediction is flagged
as the slow rank. Rank 0 prints the table."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from ..distributed.doctor import TIMEOUT
from ..doctor import ROUNDS, THRESHOLD, check_arguments, probe_runs, run_doctor
from ..errors import SftError
from .opt import run_tool, write_output

EPILOG = """exit status: 0 every device healthy (or not checked), 2 a device is slower than
predicted, 1 an error (bad arguments, a benchmark that did not run, an unwritable --json).
With --distributed every rank exits so, 2 meaning a slow rank; torchrun itself then exits 1
and lists each rank's exit code."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 on bad usage; here 2 means "a device is flagged"
        raise SftError(message)


def main(argv: list[str] | None = None) -> int:
    """sft doctor's entry point: 0 healthy, 2 a device flagged, 1 (one line on stderr) an error."""
    return run_tool("sft doctor", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = _Parser(prog="sft doctor", description=__doc__, epilog=EPILOG)
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-': "
                   "stdout); with --distributed each rank writes one, FILE holding {rank}")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"flag a check slower than this factor over its prediction (default {THRESHOLD:g})")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help=f"interleaved timing rounds; the fastest counts (default {ROUNDS})")
    p.add_argument("--distributed", action="store_true",
                   help="run under torchrun --nproc-per-node N ...: find the slow rank")
    p.add_argument("--timeout", type=float, default=TIMEOUT,
                   help=f"--distributed: seconds a rank waits for its peers (default {TIMEOUT:g})")
    args = p.parse_args(argv)
    check_arguments(args.rounds, args.threshold)  # before the progress bar starts
    if args.distributed:
        return _distributed(args)
    with tqdm(total=probe_runs(args.rounds), desc="sft doctor", unit="run", file=sys.stderr) as bar:
        report = run_doctor(args.rounds, args.threshold, progress=bar.update)
    print(report.to_text())
    if args.json:
        write_output(args.json, report.to_json() + "\n")
    return report.exit_code


def _distributed(args) -> int:
    from ..distributed.doctor import json_path, launch_env, run_distributed_doctor

    rank = launch_env()[0]  # outside torchrun: one line saying how to launch it
    json_path(args.json, rank)  # a bad --json before any rank waits for the others
    # One bar, rank 0's; no total: while a rank looks slow the ranks time the probes again.
    with tqdm(desc="sft doctor (rank 0)", unit="run", file=sys.stderr, disable=rank != 0) as bar:
        report = run_distributed_doctor(args.rounds, args.threshold, args.timeout, args.json,
                                        progress=bar.update)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
