"""Compile linalg with iree-compile and run the result with iree.runtime.

Compiled artifacts are cached on disk, keyed by the IR, the target, the flags and the compiler
version; a corrupt cache entry is recompiled, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import numpy as np

from ..errors import SftError
from ..paths import cache_dir
from .profile import Profile, parse_profile

IREE_VERSION = version("iree-base-compiler")


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


def _key(text: str, target: Target, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (IREE_VERSION, target.name, *target.flags, *flags, text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _iree_compile() -> str:
    from iree.compiler.tools.binaries import find_tool

    return find_tool("iree-compile")


def compile_module(text: str, target: Target | str = "host", flags: tuple[str, ...] = (),
                   timeout: float = 600.0, use_cache: bool = True) -> Artifact:
    """Compile linalg-on-tensors text to a .vmfb (through the on-disk cache)."""
    target = TARGETS[target] if isinstance(target, str) else target
    key = _key(text, target, flags)
    entry = cache_dir() / key
    if use_cache:
        try:
            meta = json.loads((entry.with_suffix(".json")).read_text())
            vmfb = entry.with_suffix(".vmfb").read_bytes()
            if hashlib.sha256(vmfb).hexdigest() == meta["sha256"]:
                return Artifact(vmfb, meta["dispatch_count"], target, flags)
        except (OSError, ValueError, KeyError):
            pass  # missing or corrupt: compile again
    with tempfile.TemporaryDirectory(prefix="sft-") as tmp:
        src, out, stats = Path(tmp, "in.mlir"), Path(tmp, "out.vmfb"), Path(tmp, "stats.json")
        src.write_text(text)
        _run_compile([str(src), "-o", str(out), *target.flags, *flags,
                      "--iree-scheduling-dump-statistics-format=json",
                      f"--iree-scheduling-dump-statistics-file={stats}"], timeout)
        vmfb = out.read_bytes()
        dispatches = json.loads(stats.read_text())["stream-aggregate"]["execution"]["dispatch-count"]
    if use_cache:
        _write_atomic(entry.with_suffix(".vmfb"), vmfb)
        _write_atomic(entry.with_suffix(".json"), json.dumps(
            {"sha256": hashlib.sha256(vmfb).hexdigest(), "dispatch_count": dispatches}).encode())
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
    entry = cache_dir() / (_key(text, target, (*flags, "executable-configurations")) + ".config.mlir")
    try:
        return parse_profile(entry.read_text())
    except OSError:
        pass
    with tempfile.TemporaryDirectory(prefix="sft-") as tmp:
        src, out = Path(tmp, "in.mlir"), Path(tmp, "out.mlir")
        src.write_text(text)
        _run_compile([str(src), "-o", str(out), *target.flags, *flags,
                      "--compile-to=executable-configurations"], timeout)
        configured = out.read_text()
    _write_atomic(entry, configured.encode())
    return parse_profile(configured)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_CONFIGS: dict[str, object] = {}


def _config(driver: str):
    """One runtime config (device and thread pool) per driver and process, shared by every
    loaded module, so that modules timed side by side do not compete with each other's workers."""
    import iree.runtime as rt

    if driver not in _CONFIGS:
        _CONFIGS[driver] = rt.Config(driver)
    return _CONFIGS[driver]


class Loaded:
    """A compiled module loaded in the IREE runtime: call it with numpy arrays."""

    def __init__(self, artifact: Artifact, entry: str = "main", driver: str = ""):
        import iree.runtime as rt

        self.artifact = artifact
        self._ctx = rt.SystemContext(config=_config(driver or artifact.target.driver))
        self._ctx.add_vm_module(rt.VmModule.copy_buffer(self._ctx.instance, artifact.vmfb))
        self._fn = self._ctx.modules.module[entry]

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        out = self._fn(*arrays)
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [np.asarray(o.to_host()) for o in outs]


def load(artifact: Artifact, entry: str = "main", driver: str = "") -> Loaded:
    """Load a module on `driver` (the target's own when empty)."""
    return Loaded(artifact, entry, driver)
