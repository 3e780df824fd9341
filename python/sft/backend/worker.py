"""A timing worker: `python -m sft.backend.worker REQUEST` builds callables and times them when
asked. `timing.py` is the only client: it starts one per variant (`time_variants`), or a few that
each host every variant (`time_together`).

It is a module run with `-m`, never a multiprocessing child, so that it never imports the
caller's `__main__`: a user script that compiles at top level (no `if __name__ == "__main__":`)
would otherwise run again inside every worker.

Protocol. REQUEST is a file of pickles: the parent's sys.path (so that the builders' modules
import as they did there), a dict of `calls` (calls per round) and `count`, then `count`
variants, each (build, args): the worker calls `build(*args)` for each, in order, and times
what it returns. It answers on its stdout, one JSON object a line:

    {"ready": true, "finite": [...], "failed": {}}   built each and called it once (warm-up);
                                                     finite: per variant whether every output
                                                     was finite (null: no arrays, or failed);
                                                     failed: index -> traceback of a build or
                                                     warm-up that raised
    {"time": seconds_per_call}                       one round of `calls` calls of variant K,
                                                     after each "go K" (and after calls/5
                                                     untimed ones, and at least `WARM_S`
                                                     seconds of them: the first calls after
                                                     the pause between turns run cold, 1.5-2x
                                                     slower for a 1.5 ms training step)
    {"failed": "traceback text"}                     variant K raised (in this round or before)
    {"error": "text"}                                the request could not be read; it exits

It reads line commands on stdin: "go K" runs a round of variant K; "stop", or the end of stdin
(the parent is gone), ends it. Anything the builders print goes to stderr, so it cannot garble
the answers.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import traceback


# Each turn runs untimed for at least this long first. After the pause between turns, a VM's
# two vCPUs ran on one host core for ~55 ms: a call split over both cores (`backend.parts`)
# took 450 us for its first 120 calls, then 300 (a 2-core Zen 4 VM under KVM, the calling
# thread's part twice as long as its steady 200 us, the other thread's not); one thread alone
# was 400 throughout. A variant is timed as it runs when called back to back.
WARM_S = 0.1


def finite(value) -> bool | None:
    """Whether every number in `value` (a numpy array, a torch tensor, or lists, tuples and dicts
    of them) is finite; None when it holds no arrays at all."""
    import numpy as np

    if value is None:
        return None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [finite(v) for v in value]
        if False in parts:
            return False
        return True if True in parts else None
    if hasattr(value, "detach"):  # a torch tensor (torch is not imported unless the builder did)
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except Exception:  # not array-like: nothing to check
        return None
    if array.dtype.kind in "fc":
        return bool(np.isfinite(array).all())
    return True if array.dtype.kind in "biu" else None


def _serve(request_path: str, answer) -> None:
    try:
        with open(request_path, "rb") as f:
            request = _load(f)
        variants, calls = list(request["variants"]), int(request["calls"])
    except BaseException:  # reported to the parent, which records every variant as failed
        answer({"error": traceback.format_exc(limit=3)})
        return
    fns, failed, oks = [], {}, []
    for i, (build, args) in enumerate(variants):
        fn, ok = None, None
        try:
            fn = build(*args)
            ok = finite(fn())  # warm up (and trigger any lazy compilation)
        except BaseException:  # that variant fails; the others go on
            failed[i] = traceback.format_exc(limit=3)
        fns.append(fn)
        oks.append(ok)
    answer({"ready": True, "finite": oks, "failed": failed})
    for line in sys.stdin:
        words = line.split()
        if len(words) != 2 or words[0] != "go" or not words[1].isdigit():
            return
        i = int(words[1])
        if i in failed:
            answer({"failed": failed[i]})
            continue
        try:
            warm, done = time.perf_counter() + WARM_S, 0
            while done < calls // 5 or time.perf_counter() < warm:
                fns[i]()
                done += 1
            start = time.perf_counter()
            for _ in range(calls):
                fns[i]()
            seconds = (time.perf_counter() - start) / calls
        except BaseException:
            failed[i] = traceback.format_exc(limit=3)
            answer({"failed": failed[i]})
            continue
        answer({"time": seconds})


def _load(stream) -> dict:
    """The request: the parent's sys.path comes first, in a pickle of its own, so that it is in
    place before the rest is unpickled (which imports the builder's module)."""
    path = pickle.load(stream)
    sys.path[:] = list(path) + [p for p in sys.path if p not in path]
    request = pickle.load(stream)
    return {**request, "variants": [pickle.load(stream) for _ in range(request["count"])]}


def main(argv: list[str]) -> int:
    # The answers go to a private copy of stdout; fd 1 becomes stderr, so that prints from the
    # builder or the libraries it loads cannot interleave with them.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def answer(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if len(argv) != 1:
        answer({"error": "usage: python -m sft.backend.worker REQUEST"})
        return 2
    _serve(argv[0], answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
