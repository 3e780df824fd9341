"""Compile linalg with iree-compile (through the on-disk cache of `cache.py`)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SftError
from . import cache
from .profile import Profile, parse_profile


@dataclass(frozen=True)
class Target:
    """Where code runs: the flags that pick an IREE backend and the runtime driver for it."""

    name: str
    flags: tuple[str, ...]
    driver: str


TARGETS = {
    "host": Target("host", ("--iree-hal-target-device=local",
                            "--iree-hal-local-target-device-backends=llvm-cpu",
                            "--iree-llvmcpu-target-cpu=host"), "local-task"),
    "cuda": Target("cuda", ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"), "cuda"),
    "hip": Target("hip", ("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"), "hip"),
    "vulkan": Target("vulkan", ("--iree-hal-target-device=vulkan",
                                "--iree-vulkan-target=rdna3"), "vulkan"),
}


@dataclass(frozen=True)
class Artifact:
    """A compiled module: the .vmfb bytes and what IREE says it scheduled."""

    vmfb: bytes
    dispatch_count: int
    target: Target
    flags: tuple[str, ...] = field(default=())


def _iree_compile() -> str:
    from iree.compiler.tools.binaries import find_tool

    return find_tool("iree-compile")


def compile_module(text: str, target: Target | str = "host", flags: tuple[str, ...] = (),
                   timeout: float = 600.0, use_cache: bool = True) -> Artifact:
    """Compile linalg-on-tensors text to a .vmfb (through the on-disk cache)."""
    target = TARGETS[target] if isinstance(target, str) else target
    entry_key = cache.key(text, target.name, target.flags, flags)
    if use_cache:
        hit = cache.read_module(entry_key)
        if hit is not None:
            return Artifact(hit[0], hit[1], target, flags)
    with tempfile.TemporaryDirectory(prefix="sft-") as tmp:
        src, out, stats = Path(tmp, "in.mlir"), Path(tmp, "out.vmfb"), Path(tmp, "stats.json")
        src.write_text(text)
        _run_compile([str(src), "-o", str(out), *target.flags, *flags,
                      "--iree-scheduling-dump-statistics-format=json",
                      f"--iree-scheduling-dump-statistics-file={stats}"], timeout)
        vmfb = out.read_bytes()
        dispatches = json.loads(stats.read_text())["stream-aggregate"]["execution"]["dispatch-count"]
    if use_cache:
        cache.write_module(entry_key, vmfb, dispatches)
    return Artifact(vmfb, dispatches, target, flags)


def _run_compile(args: list[str], timeout: float) -> None:
    try:
        proc = subprocess.run([_iree_compile(), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SftError(f"iree-compile timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        first = next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr.strip()[:300])
        raise SftError(f"iree-compile failed: {first}")


def profile(text: str, target: Target | str = "host", flags: tuple[str, ...] = (),
            timeout: float = 300.0) -> Profile:
    """IREE's dispatches and default lowering configs for a program, compiled only as far as
    `executable-configurations` (cached like modules)."""
    target = TARGETS[target] if isinstance(target, str) else target
    entry_key = cache.key(text, target.name, target.flags, (*flags, "executable-configurations"))
    cached = cache.read_text(entry_key, ".config.mlir")
    if cached is not None:
        return parse_profile(cached)
    with tempfile.TemporaryDirectory(prefix="sft-") as tmp:
        src, out = Path(tmp, "in.mlir"), Path(tmp, "out.mlir")
        src.write_text(text)
        _run_compile([str(src), "-o", str(out), *target.flags, *flags,
                      "--compile-to=executable-configurations"], timeout)
        configured = out.read_text()
    cache.write_text(entry_key, ".config.mlir", configured)
    return parse_profile(configured)
