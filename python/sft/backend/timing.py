"""Timing Python callables side by side: each in a process of its own, taking turns.

A process per variant keeps variants from sharing thread pools, allocator state or load order
(in one process, the first module loaded ran ~20% slower than an identical second copy); taking
turns round after round makes all variants see the same machine load; medians over rounds.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
import traceback


def loaded_call(artifact, driver: str, arrays: list):
    """A builder for `time_in_processes`: the compiled module loaded on `driver`, called on
    `arrays`."""
    from .runtime import load

    fn = load(artifact, driver=driver)
    return lambda: fn(*arrays)


def _worker(conn, build, args, calls: int) -> None:
    try:
        fn = build(*args)
        fn()  # warm up (and trigger any lazy compilation)
        conn.send(("ready", None))
    except Exception:  # reported to the parent, which records the variant as failed
        conn.send(("error", traceback.format_exc(limit=3)))
        return
    while conn.recv() == "go":
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        conn.send(("time", (time.perf_counter() - start) / calls))


def time_in_processes(builders: dict, rounds: int, calls: int, timeout: float = 600.0,
                      settle: float = 0.2):
    """Median seconds per call for each `name -> (build, args)`; `build(*args)` runs in a fresh
    process and returns the callable to time. Returns (medians, errors): a variant whose build
    fails or that stops answering within `timeout` gets None and its error text. Between turns
    the machine gets `settle` seconds, so that threads still spinning after one variant's turn
    (OpenMP's spin-wait, IREE's workers) do not steal from the next."""
    ctx = multiprocessing.get_context("spawn")
    workers, errors = {}, {}
    for name, (build, args) in builders.items():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, build, args, calls), daemon=True)
        proc.start()
        child.close()  # the worker holds the only write end: its death reads as EOF here
        workers[name] = (proc, parent)
    samples = {name: [] for name in builders}

    def answer(name):
        proc, conn = workers[name]
        if not conn.poll(timeout):
            proc.kill()
            return ("error", f"no answer within {timeout:.0f} s")
        try:
            return conn.recv()
        except EOFError:
            return ("error", f"the worker died (exit code {proc.exitcode})")

    for name in list(workers):
        kind, payload = answer(name)
        if kind == "error":
            errors[name] = payload
            workers.pop(name)[0].kill()
    for _ in range(rounds):
        for name in list(workers):
            time.sleep(settle)
            workers[name][1].send("go")
            kind, payload = answer(name)
            if kind == "error":
                errors[name] = payload
                workers.pop(name)[0].kill()
            else:
                samples[name].append(payload)
    for proc, conn in workers.values():
        conn.send("stop")
        proc.join(10)
    medians = {name: (statistics.median(s) if s and name not in errors else None)
               for name, s in samples.items()}
    return medians, errors
