"""sft-demo: compile bundled models with sft's search, check them against PyTorch eager, and
print how fast they run beside PyTorch eager and IREE's own defaults.

A short version of `sft-bench speed` (no torch.compile, four models by default). Each variant is
timed in a process of its own, the variants taking turns; the numbers are medians of rounds.
"""

from __future__ import annotations

import argparse
import sys

from ..models import SUITE
from .bench import speed
from .opt import run_tool

DEFAULT_MODELS = ("linear", "mlp", "gpt2_block", "linear_attention")


def main(argv: list[str] | None = None) -> int:
    """sft-demo's entry point; bad input or an unwritable output is one error line and exit code 1."""
    return run_tool("sft-demo", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="sft-demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*",
                   help=f"models to run (default: {', '.join(DEFAULT_MODELS)}; any of {', '.join(SUITE)})")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median)")
    p.add_argument("--calls", type=int, default=50, help="calls per round")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in SUITE]
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {', '.join(SUITE)}")
    result = speed(args.models or list(DEFAULT_MODELS), args.rounds, args.calls, use_torch_compile=False)
    return 0 if all(row["ok"] for row in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
