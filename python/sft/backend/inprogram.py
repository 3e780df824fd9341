"""Each dispatch's time inside its whole program, as IREE's runtime records it.

`iree-benchmark-module` runs the program with IREE's HAL profiling of host execution
(`--device_profiling_mode=host-execution`), and `iree-profile` reads the bundle back: per
dispatch function, how often it ran, its wall time per run and the summed time of its
workgroups (over every worker). Why not time each executable alone (IREE's benchmark module
per executable): there the same 32x1024x256 matmul measured 480 us per dispatch against 233 us
in its program (over zeroed buffers, cause not found), and what a program loses between its
dispatches (the executor's wake-ups, the VM, allocations) is only seen whole: the call's time
less the dispatches' sum.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import SftError
from .bench import _UNITS, Variant, _tool, input_flags
from .runtime import device_flags
from .process import run_group

PROFILING_MODE = "host-execution"  # the family IREE's local (CPU) drivers record
# the last `_dispatch_N_` (or `_encoding_N_`, data tiling's packs) names the kernel itself
_KERNEL = re.compile(r".*_(?:dispatch|encoding)_\d+_(\w+)$")


@dataclass(frozen=True)
class MeasuredDispatch:
    """One dispatch function of a program, per call of the program."""

    name: str            # IREE's dispatch function name, e.g. main_dispatch_3_matmul_32x1024x256_f32
    runs: float          # executions per call of the program
    seconds: float       # wall time per execution, first workgroup's start to last's end
    tile_seconds: float  # its workgroups' summed time per execution (every worker's share)
    workgroups: int      # workgroups per execution

    @property
    def kernel(self) -> str:
        """What IREE named the kernel: its root op's kind, extents and types
        (`matmul_32x1024x256_f32`), as `backend.profile` names dispatches."""
        found = _KERNEL.match(self.name)
        return found.group(1) if found else self.name

    @property
    def seconds_per_call(self) -> float:
        return self.runs * self.seconds


@dataclass(frozen=True)
class ProgramTimes:
    """Where one call of a program goes: its wall time and each dispatch's share of it."""

    call_seconds: float                       # the benchmark's wall time per call (under profiling)
    dispatches: tuple[MeasuredDispatch, ...]  # slowest first

    @property
    def dispatch_seconds(self) -> float:
        return sum(d.seconds_per_call for d in self.dispatches)

    @property
    def between_seconds(self) -> float:
        """The call's time outside every dispatch: VM, queue, executor wake-ups, allocation."""
        return max(self.call_seconds - self.dispatch_seconds, 0.0)


def _groups(bundle: Path, timeout: float) -> list[dict]:
    proc = run_group([_tool("iree-profile"), "dispatch", "--format=jsonl", str(bundle)], timeout)
    if proc.returncode != 0:
        raise SftError(f"iree-profile could not read {bundle.name}: "
                       f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [r for r in rows if r.get("type") == "host_dispatch_group"]


def profile_program(variant: Variant, inputs: list, calls: int = 20, function: str = "main",
                    timeout: float = 120.0) -> ProgramTimes:
    """Run `variant` `calls` times on `inputs` (arrays or shape strings) under IREE's profiling
    of host execution and return each dispatch's time per call. Raises SftError where the
    program fails, the tool runs past `timeout` or the driver records nothing."""
    with tempfile.TemporaryDirectory(prefix="sft-inprogram-") as tmp:
        folder = Path(tmp)
        module, bundle = folder / "module.vmfb", folder / "run.ireeprof"
        module.write_bytes(variant.artifact.vmfb)
        cmd = [_tool("iree-benchmark-module"), f"--module={module}", f"--function={function}",
               *device_flags(variant.device), *input_flags(inputs, folder),
               f"--device_profiling_mode={PROFILING_MODE}",
               f"--device_profiling_output={bundle}", "--benchmark_format=json",
               f"--benchmark_min_time={calls}x", "--benchmark_repetitions=1"]
        try:
            proc = run_group(cmd, timeout)
        except subprocess.TimeoutExpired:
            raise SftError(f"profiling {function} on {variant.device} ran past {timeout:.0f} s") from None
        if proc.returncode != 0 or not bundle.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SftError(f"profiling {function} on {variant.device} failed: {tail[0][:300]}")
        try:
            row = json.loads(proc.stdout)["benchmarks"][0]
            iterations = int(row["iterations"])
            call = float(row["real_time"]) * _UNITS[row["time_unit"]]
        except (ValueError, KeyError, IndexError) as err:
            raise SftError(f"iree-benchmark-module's report did not read ({err})") from None
        groups = _groups(bundle, timeout)
    if not groups:
        raise SftError(f"{variant.device} recorded no dispatch (profiling mode {PROFILING_MODE})")
    times = [MeasuredDispatch(name=g["key"], runs=g["valid"] / iterations,
                              seconds=g["total_ns"] * 1e-9 / max(g["valid"], 1),
                              tile_seconds=g["total_tile_duration_sum_ns"] * 1e-9 / max(g["valid"], 1),
                              workgroups=math.prod(g.get("last_workgroup_count") or [1]))
             for g in groups]
    return ProgramTimes(call, tuple(sorted(times, key=lambda d: -d.seconds_per_call)))
