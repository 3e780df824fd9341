"""The on-disk cache of compiled modules and IREE's profiles of programs.

Entries are keyed by the IR, the target, the flags and the compiler version, and named by that
key (32 hex digits, then a suffix). Each is written atomically (a temporary file renamed into
place), and an entry that does not check out (missing, unreadable, undecodable, wrong checksum)
is deleted and compiled again, never trusted.

The cache is a convenience: a folder that cannot be written, or a full disk, skips it (one
warning per process). Its size is bounded (`SFT_CACHE_MAX_BYTES`, default 2 GiB): after each
write the least recently used entries go (a hit touches its files). Only entries are counted or
evicted: the tuning database, the host calibration and `tmp/` are not entries.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from ..paths import cache_dir, warn_once
from . import profile as _profile_module
from .profile import Profile

IREE_VERSION = version("iree-base-compiler")
MAX_BYTES_ENV = "SFT_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
# A profile is stored parsed, so a changed parser must not read profiles its predecessor wrote:
# the parser's own source is part of every profile's key.
PROFILE_FORMAT = hashlib.sha256(Path(_profile_module.__file__).read_bytes()).hexdigest()[:12]
_ENTRY = re.compile(r"[0-9a-f]{32}\.")
_LEGACY = ".config.mlir"  # configured IR text, as older versions cached it (weights and all)


def key(text: str, target_name: str, target_flags: tuple[str, ...], flags: tuple[str, ...]) -> str:
    """The cache key of compiling `text` for a target with extra flags."""
    h = hashlib.sha256()
    for part in (IREE_VERSION, target_name, *target_flags, *flags, text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def valid_vmfb(data: bytes) -> bool:
    """Whether `data` looks like a whole IREE module. iree-compile writes a FlatBuffer with the
    file identifier `IREE` (bytes 4..8, or 8..12 when size-prefixed), wrapped in an uncompressed
    zip when the module embeds files (as llvm-cpu modules do): the zip's checksums are checked
    and its first member is the FlatBuffer."""
    body = data
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if archive.testzip() is not None:
                    return False
                body = archive.read(archive.namelist()[0])
        except (zipfile.BadZipFile, IndexError, ValueError, EOFError, OSError):
            return False
    return b"IREE" in (body[4:8], body[8:12])


# iree-compile writes the path of the file it read into a module's debug information, and each
# compile reads from a scratch folder of its own (`paths.scratch_dir`: sft-<pid>-<random>)
_SCRATCH_INPUT = re.compile(rb"sft-\d+-[^/\x00]+/in\.mlir")


def module_digest(data: bytes) -> bytes:
    """What a compiled module runs, as a digest: two compiles of one program under flags that
    change nothing in it (reassociation where nothing reduces) give one digest, though their
    bytes differ in the scratch folder named in their debug information and in the zip's
    checksums over it."""
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [(name, archive.read(name)) for name in archive.namelist()]
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        members = [("", data)]  # a bare FlatBuffer
    for name, body in members:
        h.update(name.encode() + b"\0" + _SCRATCH_INPUT.sub(b"in.mlir", body) + b"\0")
    return h.digest()


def _touch(*paths: Path) -> None:
    """Mark entries used now, for least-recently-used eviction (atime is not reliable)."""
    for path in paths:
        try:
            os.utime(path)
        except OSError:
            pass  # a read-only cache still serves hits


def _discard(*paths: Path) -> None:
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def read_module(entry_key: str) -> tuple[bytes, int] | None:
    """(vmfb bytes, dispatch count) of a cached module, or None when missing or corrupt (a
    corrupt entry is deleted)."""
    meta_path, vmfb_path = (cache_dir() / (entry_key + suffix) for suffix in (".json", ".vmfb"))
    try:
        meta = json.loads(meta_path.read_bytes())
        vmfb = vmfb_path.read_bytes()
        count = meta["dispatch_count"]
        if hashlib.sha256(vmfb).hexdigest() == meta["sha256"] and isinstance(count, int):
            _touch(meta_path, vmfb_path)
            return vmfb, count
    except FileNotFoundError:
        return None  # not cached (or half written by a process still at it)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # unreadable, not UTF-8, not JSON, wrong shape: as good as missing
    _discard(meta_path, vmfb_path)
    return None


def write_module(entry_key: str, vmfb: bytes, dispatch_count: int) -> None:
    """Cache a module (skipped, with one warning, when the cache cannot be written)."""
    meta = json.dumps({"sha256": hashlib.sha256(vmfb).hexdigest(), "dispatch_count": dispatch_count})
    # The vmfb first: a meta file only ever names a vmfb that was fully written.
    if _write(cache_dir() / (entry_key + ".vmfb"), vmfb):
        _write(cache_dir() / (entry_key + ".json"), meta.encode())
    evict()


def read_profile(entry_key: str) -> Profile | None:
    """A cached profile, or None when missing or corrupt (a corrupt entry is deleted)."""
    path = cache_dir() / (entry_key + ".profile.json")
    try:
        found = Profile.from_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        _discard(path)
        return None
    _touch(path)
    return found


def write_profile(entry_key: str, found: Profile) -> None:
    """Cache a profile (skipped, with one warning, when the cache cannot be written)."""
    _write(cache_dir() / (entry_key + ".profile.json"), found.to_json().encode())
    evict()


def _write(path: Path, data: bytes) -> bool:
    try:
        write_atomic(path, data)
        return True
    except OSError as err:
        warn_once(f"cache:{path.parent}", f"{path.parent}: cannot write to the sft cache "
                  f"({err.strerror or err}); compiling without it")
        return False


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` all at once or not at all: a temporary file beside it, renamed into
    place; on any failure the temporary file is removed and the error raised."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _discard(Path(tmp))
        raise


def max_bytes() -> int:
    """The cache's size limit: `SFT_CACHE_MAX_BYTES` (bytes), else 2 GiB."""
    text = os.environ.get(MAX_BYTES_ENV)
    if text is None:
        return DEFAULT_MAX_BYTES
    try:
        return int(text)
    except ValueError:
        warn_once(f"env:{text}", f"{MAX_BYTES_ENV}={text!r} is not a number of bytes; "
                  f"using {DEFAULT_MAX_BYTES}")
        return DEFAULT_MAX_BYTES


def evict(limit: int | None = None) -> None:
    """Delete least recently used entries (all files of a key together) until the entries take
    at most `limit` bytes (default `max_bytes()`). Configured IR that older versions cached is
    deleted outright: nothing reads it any more."""
    limit = max_bytes() if limit is None else limit
    entries: dict[str, list] = {}  # key -> [bytes, last use, paths]
    try:
        with os.scandir(cache_dir()) as it:
            for item in it:
                if not _ENTRY.match(item.name) or not item.is_file(follow_symlinks=False):
                    continue
                if item.name.endswith(_LEGACY):
                    _discard(Path(item.path))
                    continue
                stat = item.stat(follow_symlinks=False)
                entry = entries.setdefault(item.name[:32], [0, 0.0, []])
                entry[0] += stat.st_size
                entry[1] = max(entry[1], stat.st_mtime, stat.st_atime)
                entry[2].append(Path(item.path))
    except OSError:
        return
    total = sum(size for size, _, _ in entries.values())
    for size, _, paths in sorted(entries.values(), key=lambda entry: entry[1]):
        if total <= limit:
            break
        _discard(*paths)
        total -= size
