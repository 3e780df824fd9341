"""A timing worker: `python -m sft.backend.worker REQUEST` builds one callable and times it when
asked. `timing.py` starts one per variant and is the only client.

It is a module run with `-m`, never a multiprocessing child, so that it never imports the
caller's `__main__`: a user script that compiles at top level (no `if __name__ == "__main__":`)
would otherwise run again inside every worker.

Protocol. REQUEST is a pickle file of a dict: `path` (the parent's sys.path, so that the builder's
module imports as it did there), `build` and `args` (the worker calls `build(*args)` and times
what it returns), `calls` (calls per round). The worker answers on its stdout, one JSON object
a line:

    {"ready": true, "finite": true | false | null}   built and called once (warm-up); finite:
                                                     whether every output was finite (null:
                                                     the callable returns no arrays)
    {"error": "traceback text"}                      the build or a call raised; the worker exits
    {"time": seconds_per_call}                       one round of `calls` calls, after each "go"
                                                     (and after calls/5 untimed ones: the
                                                     first calls after the pause between
                                                     turns run cold, 1.5-2x slower for a
                                                     1.5 ms training step)

It reads line commands on stdin: "go" runs a round; "stop", or the end of stdin (the parent is
gone), ends it. Anything the builder prints goes to stderr, so it cannot garble the answers.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import traceback


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
        fn = request["build"](*request["args"])
        ok = finite(fn())  # warm up (and trigger any lazy compilation)
    except BaseException:  # reported to the parent, which records the variant as failed
        answer({"error": traceback.format_exc(limit=3)})
        return
    answer({"ready": True, "finite": ok})
    calls = int(request["calls"])
    for line in sys.stdin:
        if line.strip() != "go":
            return
        try:
            for _ in range(calls // 5):
                fn()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            seconds = (time.perf_counter() - start) / calls
        except BaseException:
            answer({"error": traceback.format_exc(limit=3)})
            return
        answer({"time": seconds})


def _load(stream) -> dict:
    """The request: the parent's sys.path comes first, in a pickle of its own, so that it is in
    place before the rest is unpickled (which imports the builder's module)."""
    path = pickle.load(stream)
    sys.path[:] = list(path) + [p for p in sys.path if p not in path]
    return pickle.load(stream)


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
