"""sft-demo: compile bundled models with sft, check them against PyTorch, and time them.

For each model: PyTorch eager, IREE on torch-mlir's linalg (IREE's own choices), and sft. Times
are medians over interleaved rounds, so the three see the same machine load.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..api import compile as sft_compile, linalg_of
from ..backend import compile_module, load
from ..backend.timing import time_calls
from ..models import SUITE


def run_model(name: str, rounds: int, calls: int) -> dict:
    import torch

    case = SUITE[name]
    model, inputs = case.build(), case.inputs()
    arrays = [x.numpy() for x in inputs]
    with torch.no_grad():
        expected = model(*inputs).numpy()
    baseline = compile_module(linalg_of(model, inputs)[0])
    iree_fn = load(baseline)
    compiled = sft_compile(model, inputs)
    got = compiled(*arrays)
    error = float(np.max(np.abs(got - expected)))
    ok = bool(np.allclose(got, expected, rtol=1e-4, atol=1e-5))

    def eager():
        with torch.no_grad():
            model(*inputs)

    times = time_calls({"eager": eager, "iree": lambda: iree_fn(*arrays),
                        "sft": lambda: compiled(*arrays)}, rounds, calls)
    return dict(model=name, ok=ok, max_abs_error=error, iree_dispatches=baseline.dispatch_count,
                sft_dispatches=compiled.dispatch_count, opaque=compiled.opaque_ops, **times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sft-demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"models to run (default: all of {', '.join(SUITE)})")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median)")
    p.add_argument("--calls", type=int, default=20, help="calls per round")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in SUITE]
    if unknown:
        print(f"sft-demo: error: unknown model(s) {unknown}; known: {', '.join(SUITE)}", file=sys.stderr)
        return 1
    header = (f"{'model':<20}{'match':>6}{'max|err|':>10}{'disp iree':>10}{'disp sft':>9}"
              f"{'eager ms':>10}{'iree ms':>9}{'sft ms':>8}{'sft/iree':>9}{'sft/eager':>10}")
    print(header)
    print("-" * len(header))
    failed = 0
    for name in args.models or list(SUITE):
        r = run_model(name, args.rounds, args.calls)
        failed += not r["ok"]
        print(f"{name:<20}{'yes' if r['ok'] else 'NO':>6}{r['max_abs_error']:>10.1e}"
              f"{r['iree_dispatches']:>10}{r['sft_dispatches']:>9}{r['eager'] * 1e3:>10.3f}"
              f"{r['iree'] * 1e3:>9.3f}{r['sft'] * 1e3:>8.3f}{r['iree'] / r['sft']:>8.2f}x"
              f"{r['eager'] / r['sft']:>9.2f}x", flush=True)
    print("\nratios are speed-ups of sft (higher is faster); times are medians of interleaved rounds")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
