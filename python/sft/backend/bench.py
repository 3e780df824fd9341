"""Timing compiled modules in their own processes with `iree-benchmark-module`.

Each variant runs in a fresh process, so no variant inherits another's warm caches, thread pool or
load order; variants take turns round after round, so all see the same machine load; the median
over rounds is reported. A variant that crashes or runs past its timeout is recorded as failed
(its time is None) and never stops the others.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SftError
from .iree import Artifact
from .process import run_group
from .runtime import device_flags

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# Seconds of calls each process makes before the timed ones (at least one call). Without it a
# call longer than the minimum time was timed once, cold: on a 2-core Zen 3 VM a 64 MiB copy's
# first call faulted in its result's 16K pages (3.7 us each there), 51-65 ms against 8.5 warm,
# and `sft-calibrate` read DRAM at 2.2 GB/s where sft's runtime streams it at ~15.
WARMUP_SECONDS = 0.01


@dataclass(frozen=True)
class Variant:
    """One thing to time: a compiled module and the runtime driver to run it on."""

    artifact: Artifact
    driver: str = ""  # empty: the target's own driver

    @property
    def device(self) -> str:
        return self.driver or self.artifact.target.driver


def _tool(name: str) -> str:
    """A runtime tool binary; iree-base-runtime ships them beside its native library."""
    try:
        from iree import _runtime_libs
    except ImportError:
        raise SftError(f"{name} not found: iree-base-runtime is not installed") from None
    path = Path(_runtime_libs.__file__).parent / name
    if not path.exists():
        raise SftError(f"{name} not found in {path.parent} (it ships with iree-base-runtime)")
    return str(path)


def input_flags(inputs: list, folder: Path) -> list[str]:
    """`--input` flags for arrays (saved as .npy in `folder`) or shape strings like '32x256xf32'
    (zero-filled by the tool). A 0-d array is written out as its value (`f64=0.001`): IREE's
    tools read a 0-d .npy back as shape [1], which a scalar argument refuses."""
    flags = []
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            flags.append(f"--input={x}")
        elif np.ndim(x) == 0:
            value = np.asarray(x)
            kind = {"f": "f", "i": "i", "u": "ui", "b": "i"}[value.dtype.kind]
            bits = 1 if value.dtype.kind == "b" else 8 * value.dtype.itemsize
            text = int(value) if value.dtype.kind == "b" else value.item()
            flags.append(f"--input={kind}{bits}={text!r}")
        else:
            path = folder / f"input{i}.npy"
            np.save(path, np.ascontiguousarray(x))
            flags.append(f"--input=@{path}")
    return flags


def _run_once(cmd: list[str], timeout: float, clock: str = "real_time") -> float | None:
    try:  # in a process group of its own, killed whole past the timeout
        proc = run_group(cmd, timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if proc.returncode != 0:
        return None
    try:
        row = json.loads(proc.stdout)["benchmarks"][0]
        return float(row[clock]) * _UNITS[row["time_unit"]]
    except (ValueError, KeyError, IndexError):
        return None


def benchmark(variants: dict, inputs: list, rounds: int = 5, min_time: float = 0.05,
              timeout: float = 60.0, function: str = "main", progress=None,
              cpu_time: bool = False) -> dict:
    """Median seconds per call of each variant (None where it failed in any round).

    `inputs` are numpy arrays or shape strings, the same for every variant; `progress`, if
    given, is called once per process run (a tqdm update, say). With `cpu_time`, a variant run
    inline on `local-sync` (one thread) is timed by its CPU time, which on a shared machine is
    its own work where wall time is mostly other processes' (measured under a load of 5 on 2
    cores: wall 112 to 510 us, CPU 97 to 103 us, for one module); other drivers, and every
    variant without it, by wall time (what the doctor needs: a slowed core shows there)."""
    tool = _tool("iree-benchmark-module")
    samples: dict = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as tmp:
        folder = Path(tmp)
        flags = input_flags(inputs, folder)
        commands = {}
        for i, (name, variant) in enumerate(variants.items()):
            module = folder / f"module{i}.vmfb"
            module.write_bytes(variant.artifact.vmfb)
            commands[name] = [tool, f"--module={module}", f"--function={function}",
                              *device_flags(variant.device), *flags, "--benchmark_format=json",
                              f"--benchmark_min_time={min_time}s",
                              f"--benchmark_min_warmup_time={WARMUP_SECONDS}"]
        for _ in range(rounds):
            for name, cmd in commands.items():
                if samples[name] is None:
                    continue
                inline = cpu_time and variants[name].device == "local-sync"
                clock = "cpu_time" if inline else "real_time"
                seconds = _run_once(cmd, timeout, clock)
                samples[name] = None if seconds is None else samples[name] + [seconds]
                if progress:
                    progress()
    return {name: (statistics.median(s) if s else None) for name, s in samples.items()}
