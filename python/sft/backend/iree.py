"""Compile linalg with iree-compile (through the on-disk cache of `cache.py`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SftError
from ..paths import scratch_dir
from . import cache
from .process import env_seconds, exit_text, run_group
from .profile import Profile, parse_profile

if TYPE_CHECKING:
    from ..targets import Target


# IREE demotes f64 to f32 by default, silently: a program's f64 arithmetic (torch-mlir computes
# var/std through f64) must stay f64, so every target keeps it.


@dataclass(frozen=True)
class Artifact:
    """A compiled module: the .vmfb bytes and what IREE says it scheduled."""

    vmfb: bytes
    dispatch_count: int
    target: Target
    flags: tuple[str, ...] = field(default=())


COMPILE_TOOL_ENV = "SFT_IREE_COMPILE"
COMPILE_TIMEOUT_ENV = "SFT_COMPILE_TIMEOUT"
RUN_TIMEOUT_ENV = "SFT_RUN_TIMEOUT"


def compile_timeout() -> float:
    """Seconds one iree-compile run (a module or a profile) may take: $SFT_COMPILE_TIMEOUT, else
    600."""
    return env_seconds(COMPILE_TIMEOUT_ENV, 600.0)


def run_timeout() -> float:
    """Seconds a timing worker may take to answer (its build and warm-up, then each round):
    $SFT_RUN_TIMEOUT, else 120."""
    return env_seconds(RUN_TIMEOUT_ENV, 120.0)


def _iree_compile() -> str:
    """The iree-compile binary: the one iree-base-compiler ships, unless $SFT_IREE_COMPILE names
    another (a testing and override hook: the tests point it at fake tools that hang or crash;
    a user can point it at another build of IREE)."""
    override = os.environ.get(COMPILE_TOOL_ENV, "").strip()
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise SftError(f"{COMPILE_TOOL_ENV}={override!r} is not an executable file")
        return override
    from iree.compiler.tools.binaries import find_tool

    try:
        return find_tool("iree-compile")
    except ValueError as e:
        raise SftError(f"iree-compile not found: {str(e).splitlines()[0]}") from None


def _compiler_input(tmp: Path, text: str) -> Path:
    src = tmp / "in.mlir"
    try:
        src.write_text(text)
    except OSError as err:
        raise SftError(f"cannot write iree-compile's input in {tmp}: {err.strerror or err}") from None
    return src


def _written_text(out: Path) -> str:
    """The program iree-compile wrote to `out`; an SftError where it wrote none it exited 0."""
    try:
        return out.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SftError(f"iree-compile exited 0 but wrote no readable program ({err})") from None


def _dispatch_count(stats: Path) -> int:
    """The dispatch count from iree-compile's statistics; a missing or malformed file (an
    iree-compile that exited 0 without finishing) is an SftError, so that nothing is cached."""
    try:
        count = json.loads(stats.read_bytes())["stream-aggregate"]["execution"]["dispatch-count"]
        if type(count) is int and count >= 0:
            return count
        problem = f"dispatch-count {count!r}"
    except OSError as err:
        problem = err.strerror or str(err)
    except (ValueError, KeyError, TypeError) as err:
        problem = f"{type(err).__name__}: {err}"
    raise SftError(f"iree-compile exited 0 but wrote no valid statistics ({problem})")


def compile_module(text: str, target: Target, flags: tuple[str, ...] = (),
                   timeout: float | None = None, use_cache: bool = True) -> Artifact:
    """Compile linalg-on-tensors text to a .vmfb (through the on-disk cache). Output that is not
    a whole module (an iree-compile that exited 0 but was cut short) is an SftError and is not
    cached."""
    entry_key = cache.key(text, target.name, target.compile_key(), flags)
    if use_cache:
        hit = cache.read_module(entry_key)
        if hit is not None:
            return Artifact(hit[0], hit[1], target, flags)
    with scratch_dir() as tmp:
        src, out, stats = _compiler_input(tmp, target.module_text(text)), tmp / "out.vmfb", tmp / "stats.json"
        _run_compile([str(src), "-o", str(out), *target.flags, *flags,
                      "--iree-scheduling-dump-statistics-format=json",
                      f"--iree-scheduling-dump-statistics-file={stats}"], timeout)
        try:
            vmfb = out.read_bytes()
        except OSError as err:
            raise SftError(f"iree-compile exited 0 but wrote no module ({err.strerror or err})") from None
        if not cache.valid_vmfb(vmfb):
            raise SftError(f"iree-compile exited 0 but wrote no valid module ({len(vmfb)} bytes, "
                           "not an IREE FlatBuffer)")
        dispatches = _dispatch_count(stats)
    if use_cache:
        cache.write_module(entry_key, vmfb, dispatches)
    return Artifact(vmfb, dispatches, target, flags)


def _run_compile(args: list[str], timeout: float | None = None) -> None:
    """Run iree-compile on `args` (its process group killed past `timeout` seconds, by default
    `compile_timeout()`); any failure is an SftError naming how it failed."""
    timeout = compile_timeout() if timeout is None else timeout
    tool = _iree_compile()
    try:
        proc = run_group([tool, *args], timeout)
    except subprocess.TimeoutExpired:
        raise SftError(f"iree-compile timed out after {timeout:g} s "
                       f"(${COMPILE_TIMEOUT_ENV} sets the limit)") from None
    except OSError as e:
        raise SftError(f"iree-compile could not be started ({tool}): {e.strerror or e}") from None
    if proc.returncode < 0:
        last = proc.stderr.strip().splitlines()[-1:] or [""]
        raise SftError(f"iree-compile crashed ({exit_text(proc.returncode)})"
                       + (f": {last[0][:300]}" if last[0] else ""))
    if proc.returncode != 0:
        first = next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr.strip()[:300])
        raise SftError(f"iree-compile failed: {first}")


GLOBAL_OPT = "global-optimization"


def global_opt_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `flags` that change what IREE's global optimization makes of a program (its
    own: im2col, data tiling's packs; aggressive fusion acts later, in dispatch creation), so
    that profiles under flags alike in these resume from one global optimization (`profiles`)."""
    return tuple(f for f in flags if f.startswith("--iree-global-opt-"))


def _profile_key(text: str, target: Target, flags: tuple[str, ...]) -> str:
    return cache.key(text, target.name, target.compile_key(),
                     (*flags, "executable-configurations", cache.PROFILE_FORMAT))


def profile(text: str, target: Target, flags: tuple[str, ...] = (),
            timeout: float | None = None, optimized: str | None = None) -> Profile:
    """IREE's dispatches and default lowering configs for a program, compiled only as far as
    `executable-configurations`. Cached parsed (the configured IR holds the weights as text).
    `optimized`: the program after IREE's global optimization under `flags`' global-opt
    flags (`global_optimized`), resumed from instead of compiling `text` from the start."""
    entry_key = _profile_key(text, target, flags)
    cached = cache.read_profile(entry_key)
    if cached is not None:
        return cached
    with scratch_dir() as tmp:
        src, out = _compiler_input(tmp, optimized or target.module_text(text)), tmp / "out.mlir"
        resume = (f"--compile-from={GLOBAL_OPT}",) if optimized else ()
        _run_compile([str(src), "-o", str(out), *target.flags, *flags, *resume,
                      "--compile-to=executable-configurations"], timeout)
        configured = _written_text(out)
    # A whole module: a `module` line (after any attribute aliases) and its closing brace.
    if not (re.search(r"^module\b", configured, re.M) and configured.rstrip().endswith("}")):
        raise SftError(f"iree-compile exited 0 but wrote no valid program ({len(configured)} chars)")
    found = parse_profile(configured)
    cache.write_profile(entry_key, found)
    return found


def global_optimized(text: str, target: Target, flags: tuple[str, ...] = (),
                     timeout: float | None = None) -> str:
    """`text` compiled as far as IREE's global optimization under `flags`' global-opt flags
    (`global_opt_flags`): what `profile(..., optimized=)` resumes from. A GPT-2 small program
    took 0.38 s to get there, and a profile 0.62 s from there against 0.98 s from the start."""
    with scratch_dir() as tmp:
        src, out = _compiler_input(tmp, target.module_text(text)), tmp / "out.mlir"
        _run_compile([str(src), "-o", str(out), *target.flags,
                      *global_opt_flags(flags), f"--compile-to={GLOBAL_OPT}"], timeout)
        return _written_text(out)


def profiles(requests: list[tuple[str, tuple[str, ...]]], target: Target, workers: int = 1) -> list:
    """IREE's profile of each (program text, dispatch-forming flags), compiled side by side on
    `workers` threads (each an iree-compile process); None where IREE fails under those flags
    (its aggressive fusion fails on training graphs). Requests not cached that share a text
    and its global-opt flags are resumed from one global optimization of it: a GPT-2 small
    search profiles each of three texts under up to four sets of flags."""
    def group(request):
        return request[0], global_opt_flags(request[1])

    cached = {r: cache.read_profile(_profile_key(r[0], target, r[1])) for r in dict.fromkeys(requests)}
    shared = [key for key, n in Counter(group(r) for r, found in cached.items() if found is None).items()
              if n > 1]

    def optimize(key):
        try:
            return global_optimized(key[0], target, key[1])
        except SftError:  # each profile then fails or succeeds on its own, from the start
            return None

    def one(request):
        if cached[request] is not None:
            return cached[request]
        try:
            return profile(request[0], target, request[1], optimized=optimized.get(group(request)))
        except SftError:
            return None

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        optimized = dict(zip(shared, pool.map(optimize, shared)))
        return list(pool.map(one, requests))


def convert_input(text: str, input_type: str, timeout: float | None = None) -> str:
    """A front end's program (`input_type`: stablehlo, tosa, ...) through iree-compile's input
    phase only (`--compile-to=input`): linalg on tensors, in IREE's `util.func` form. f64 is kept:
    the input phase is where IREE would demote it to f32."""
    from ..targets.base import KEEP_F64

    with scratch_dir() as tmp:
        src, out = _compiler_input(tmp, text), tmp / "out.mlir"
        _run_compile([str(src), "-o", str(out), f"--iree-input-type={input_type}", KEEP_F64,
                      "--compile-to=input"], timeout)
        return _written_text(out)
