"""The on-disk cache of compiled modules and IREE's configured programs.

Entries are keyed by the IR, the target, the flags and the compiler version; each is written
atomically (a temporary file renamed into place), and an entry that does not check out is
compiled again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib.metadata import version
from pathlib import Path

from ..paths import cache_dir

IREE_VERSION = version("iree-base-compiler")


def key(text: str, target_name: str, target_flags: tuple[str, ...], flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (IREE_VERSION, target_name, *target_flags, *flags, text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def read_module(entry_key: str) -> tuple[bytes, int] | None:
    """(vmfb bytes, dispatch count) of a cached module, or None when missing or corrupt."""
    entry = cache_dir() / entry_key
    try:
        meta = json.loads((entry.with_suffix(".json")).read_text())
        vmfb = entry.with_suffix(".vmfb").read_bytes()
        if hashlib.sha256(vmfb).hexdigest() == meta["sha256"]:
            return vmfb, meta["dispatch_count"]
    except (OSError, ValueError, KeyError):
        pass  # missing or corrupt: compile again
    return None


def write_module(entry_key: str, vmfb: bytes, dispatch_count: int) -> None:
    entry = cache_dir() / entry_key
    write_atomic(entry.with_suffix(".vmfb"), vmfb)
    write_atomic(entry.with_suffix(".json"), json.dumps(
        {"sha256": hashlib.sha256(vmfb).hexdigest(), "dispatch_count": dispatch_count}).encode())


def read_text(entry_key: str, suffix: str) -> str | None:
    try:
        return (cache_dir() / (entry_key + suffix)).read_text()
    except OSError:
        return None


def write_text(entry_key: str, suffix: str, text: str) -> None:
    write_atomic(cache_dir() / (entry_key + suffix), text.encode())


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
