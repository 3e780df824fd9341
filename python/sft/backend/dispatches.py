"""Where a program's time goes: each of its executables compiled alone and timed.

iree-compile writes a benchmark module per executable of a program
(`--iree-hal-dump-executable-benchmarks-to`): the executable as configured (IREE's tile choices,
or a plan's), with a function that dispatches it over the program's whole workgroup grid on
zeroed buffers. Each is compiled and timed by `iree-benchmark-module` on the target's kernel
driver (the host's `local-sync`: one thread, CPU time, as kernels alone are timed for the
search). An executable the program dispatches several times is timed once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SftError
from .bench import Variant, benchmark
from .iree import _compiler_input, _run_compile, compile_module, scratch_dir

if TYPE_CHECKING:
    from ..targets import Target

# `util.func public @main_dispatch_3_embedded_elf_x86_64_main_dispatch_3_matmul_64x128x128_f32`
_ENTRY = re.compile(r"util\.func public @(\w+)\(.*iree\.benchmark = \"dispatch\"")
# the last `_dispatch_N_` (or `_encoding_N_`, data tiling's packs) names the kernel itself
_KERNEL = re.compile(r".*_(?:dispatch|encoding)_\d+_(\w+)$")


@dataclass(frozen=True)
class DispatchTime:
    """One executable: its function in the benchmark module, what IREE named its kernel (the
    root op's kind, extents and types: `matmul_64x128x128_f32`), seconds per dispatch (None:
    it did not compile or run)."""

    function: str
    kernel: str
    seconds: float | None


def executable_benchmarks(text: str, target: Target, flags: tuple[str, ...] = ()) -> dict[str, str]:
    """IREE's benchmark module of each executable of `text` (compiled with `flags`): function
    name -> module text, in dispatch order."""
    with scratch_dir() as tmp:
        src, dump = _compiler_input(tmp, target.module_text(text)), tmp / "benchmarks"
        _run_compile([str(src), "-o", str(tmp / "out.vmfb"), *target.flags, *flags,
                      f"--iree-hal-dump-executable-benchmarks-to={dump}"])
        found = {}
        for path in sorted(dump.glob("*.mlir"), key=_dispatch_index):
            module = path.read_text()
            entry = _ENTRY.search(module)
            if entry is None:
                raise SftError(f"no benchmark function in IREE's {path.name}")
            found[entry.group(1)] = module
    return found


def _dispatch_index(path: Path) -> int:
    match = re.search(r"_(?:dispatch|encoding)_(\d+)_", path.name)
    return int(match.group(1)) if match else -1


def time_dispatches(text: str, target: Target, flags: tuple[str, ...] = (), rounds: int = 3,
                    progress=None) -> list[DispatchTime]:
    """Seconds per dispatch of each executable of `text` compiled with `flags`, alone, on the
    target's kernel driver (median of `rounds` processes). `progress()` is called once per
    executable."""
    timed = []
    for function, module in executable_benchmarks(text, target, flags).items():
        kernel = _KERNEL.search(function)
        try:
            variant = Variant(compile_module(module, target, flags), target.kernel_driver)
            seconds = benchmark({function: variant}, [], rounds=rounds, function=function,
                                cpu_time=True)[function]
        except SftError:
            seconds = None
        timed.append(DispatchTime(function, kernel.group(1) if kernel else function, seconds))
        if progress:
            progress()
    return timed
