"""Where sft keeps what it learns between runs: compiled modules, the tuning database and the
host calibration. `SFT_CACHE_DIR` moves all of it (tests point it at a temporary folder).

Also sft's scratch folders (`scratch_dir`): they live under `cache_dir()/tmp/` named
`sft-<pid>-...`, so that those a killed process left behind can be found and removed."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV = "SFT_CACHE_DIR"
_warned: set[str] = set()      # one warning per problem and process, not one per compile
_swept: set[Path] = set()      # scratch parents already cleared of dead processes' folders


def warn_once(key: str, message: str) -> None:
    """Warn about a degraded cache or database once per process (keyed by `key`)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def cache_dir() -> Path:
    """The cache folder, created if need be. Never raises: a folder that cannot be created (a
    file in the way, a read-only parent) is returned all the same, with one warning; every
    reader then finds nothing and every writer skips."""
    # An empty SFT_CACHE_DIR means unset, as in a shell's `SFT_CACHE_DIR= cmd`: Path("") would
    # be the working directory, filled with cache files.
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sft")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        warn_once(f"cache:{path}", f"{path}: cannot create the sft cache folder "
                  f"({err.strerror or err}); nothing is cached")
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _sweep(parent: Path) -> None:
    """Remove the scratch folders of processes that no longer run (a kill -9 skips cleanup)."""
    if parent in _swept:
        return
    _swept.add(parent)
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        parts = entry.name.split("-")
        if len(parts) >= 3 and parts[0] == "sft" and parts[1].isdigit() \
                and int(parts[1]) != os.getpid() and not _pid_alive(int(parts[1])):
            shutil.rmtree(entry, ignore_errors=True)


def _scratch_parent() -> Path:
    """`cache_dir()/tmp`, or the system's temporary folder when the cache is not writable."""
    parent = cache_dir() / "tmp"
    try:
        parent.mkdir(exist_ok=True)
        if os.access(parent, os.W_OK):
            return parent
    except OSError:
        pass
    return Path(tempfile.gettempdir())


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh folder for one compile's files, removed on exit. Use instead of
    `tempfile.TemporaryDirectory(prefix="sft-")`: its name carries this process's id, and the
    first use in a process removes the folders that dead processes left behind."""
    parent = _scratch_parent()
    if parent.parent == cache_dir():
        _sweep(parent)  # only sft's own folder: the system's may hold other namespaces' pids
    path = Path(tempfile.mkdtemp(prefix=f"sft-{os.getpid()}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
