"""Timing compiled functions side by side: interleaved rounds, medians."""

from __future__ import annotations

import statistics
import time


def time_calls(fns: dict, rounds: int, calls: int) -> dict[str, float]:
    """Median seconds per call of each fn, the rounds interleaved across fns so that all see
    the same machine load."""
    samples = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls)
    return {k: statistics.median(v) for k, v in samples.items()}
