"""What compiling costs: wall time and peak memory of IREE's default path and of `sft.compile`,
each in a fresh process with a fresh cache, and the numerics of each against PyTorch eager.

Run as `sft-bench compile [models]`; one variant is `python -m sft.tools.compile_cost MODEL
VARIANT`, which prints one JSON line. Peak memory is the largest resident set of the Python
process and, separately, of the compilers it ran (iree-compile is a child process).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

VARIANTS = ("iree", "sft-none", "sft-model")


def _measure(name: str, variant: str) -> dict:
    import numpy as np
    import torch

    from ..models import BENCH_SUITE, LARGE_SUITE

    case = {**BENCH_SUITE, **LARGE_SUITE}[name]
    model, inputs = case.build(), case.inputs()
    with torch.no_grad():
        expected = model(*inputs).numpy()
    start = time.perf_counter()
    if variant == "iree":
        from ..backend import compile_module, load
        from ..targets import get_target
        from ..program import import_model
        from ..values import to_numpy

        text, _, _, state = import_model(model, inputs)
        imported = time.perf_counter()
        fn = load(compile_module(text, get_target("host")))
        seconds = {"import": imported - start, "iree-compile": time.perf_counter() - imported}
        got = fn(*[to_numpy(v) for v in state.values()], *[x.numpy() for x in inputs])[0]
        ir_bytes = len(text)
    else:
        from ..api import compile as sft_compile

        compiled = sft_compile(model, inputs, search=variant.split("-")[1], keep_ir=True)
        seconds = dict(compiled.seconds)
        got = compiled(*inputs).numpy()
        ir_bytes = len(compiled.stages.linalg)
    total = time.perf_counter() - start
    scale = float(np.abs(expected).max()) or 1.0
    return {"model": name, "variant": variant, "seconds": total, "phases": seconds,
            "ir_bytes": ir_bytes,
            "python_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "compiler_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "max_error_rel": float(np.abs(got - expected).max()) / scale}


def run(models: list[str], timeout: float = 3600.0) -> list[dict]:
    """Every variant of every model, one fresh process and cache each, side by side."""
    rows = []
    for name in models:
        for variant in VARIANTS:
            with tempfile.TemporaryDirectory(prefix="sft-compile-cost-") as cache:
                env = {**os.environ, "SFT_CACHE_DIR": cache}
                proc = subprocess.run([sys.executable, "-m", "sft.tools.compile_cost", name, variant],
                                      capture_output=True, text=True, timeout=timeout, env=env)
            line = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
            row = json.loads(line[0]) if line else {"model": name, "variant": variant, "error":
                                                     (proc.stderr.strip().splitlines() or ["?"])[-1]}
            rows.append(row)
            print(_format(row), flush=True)
    return rows


def _format(row: dict) -> str:
    if "error" in row:
        return f"{row['model']:<18} {row['variant']:<10} failed: {row['error']}"
    phases = ", ".join(f"{k} {v:.1f}" for k, v in row["phases"].items())
    return (f"{row['model']:<18} {row['variant']:<10} {row['seconds']:7.1f} s  python peak "
            f"{row['python_peak_mb']:6.0f} MB  compiler peak {row['compiler_peak_mb']:6.0f} MB  "
            f"IR {row['ir_bytes'] / 1e3:7.0f} kB  max rel error {row['max_error_rel']:.1e}  ({phases})")


if __name__ == "__main__":
    print(json.dumps(_measure(sys.argv[1], sys.argv[2])))
