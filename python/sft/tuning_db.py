"""The tuning database: what the search measured and chose, so that a second compile of the same
workload on the same target and compiler replays instead of searching.

SQLite in WAL mode: every write is one transaction, so a process killed mid-write leaves the
previous state intact, and two processes tuning at once wait for each other's writes (busy
timeout) instead of failing.

The database only saves time, so it never stops a compile. A file that is not a sound database
(a bad header, or damage found by `PRAGMA quick_check` at open or by any later query) is moved
aside with its WAL (never deleted) and a fresh one started. A file or folder that cannot be
written, or any other failure of the file, degrades to an in-memory database (holding a copy of
what the file had, when it can be read): the search runs, its results are just not kept.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Callable, TypeVar

from .errors import SftError
from .paths import cache_dir, warn_once

COMPILER = f"iree-{version('iree-base-compiler')}"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    workload TEXT, target TEXT, compiler TEXT, candidate TEXT,
    predicted REAL, measured REAL, created REAL,
    PRIMARY KEY (workload, target, compiler, candidate));
CREATE TABLE IF NOT EXISTS plans (
    workload TEXT, target TEXT, compiler TEXT, mode TEXT,
    plan TEXT, report TEXT, created REAL,
    PRIMARY KEY (workload, target, compiler, mode));
"""
_CHECK_BELOW = 64 << 20   # quick_check reads every page: done at open for files below this size
_COPY_BELOW = 64 << 20    # an unwritable file is copied into memory below this size
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)
_T = TypeVar("_T")


class _Damaged(sqlite3.DatabaseError):
    """quick_check found damage that the header check at open does not see."""


def _is_corrupt(err: sqlite3.DatabaseError) -> bool:
    # Other DatabaseErrors (locked, read-only, I/O, disk full) say nothing about the file's
    # contents: it must not be moved aside for them.
    return isinstance(err, _Damaged) or (getattr(err, "sqlite_errorcode", 0) & 0xFF) in _CORRUPT_CODES


class TuningDB:
    """Measurements keyed by (workload hash, target description hash, compiler version,
    candidate); chosen plans keyed by (program hash, target, compiler, search mode).

    `in_memory` is True when the file could not be used and nothing written is kept."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else cache_dir() / "tuning.sqlite"
        self.in_memory = False
        self._conn = self._connect()

    # -- opening and recovering ---------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The file's connection; a corrupt file moved aside first; memory when it cannot be used."""
        if not self._writable():
            return self._memory("cannot be written")
        try:
            return self._open_file()
        except sqlite3.DatabaseError as err:
            if not _is_corrupt(err):
                return self._memory(f"cannot be used: {err}")
            if not self._move_aside(err):
                return self._memory(f"is damaged ({err}) and cannot be moved aside")
        try:
            return self._open_file()
        except sqlite3.DatabaseError as err:
            return self._memory(f"cannot be used: {err}")

    def _writable(self) -> bool:
        """SQLite's WAL mode writes `-wal` and `-shm` files beside the database: the folder must
        be writable as well as the file."""
        folder = self.path.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            return False
        return not self.path.exists() or (self.path.is_file() and os.access(self.path, os.R_OK | os.W_OK))

    def _open_file(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            # WAL persists in the file: switching takes a lock that does not wait for another
            # process's (two test workers: "database is locked"), so only the first one switches
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            if self.path.stat().st_size < _CHECK_BELOW:
                result = conn.execute("PRAGMA quick_check").fetchone()[0]
                if result != "ok":
                    raise _Damaged(f"quick_check: {result}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _move_aside(self, err: Exception) -> bool:
        """Rename the damaged file (and its WAL and shared memory, which belong to it) aside."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        try:
            self.path.rename(aside)
            for suffix in ("-wal", "-shm"):
                sidecar = self.path.with_name(self.path.name + suffix)
                if sidecar.exists():
                    sidecar.rename(aside.with_name(aside.name + suffix))
        except OSError:
            return False
        warnings.warn(f"{self.path}: not a valid tuning database ({err}); moved to {aside}, "
                      "starting a new one", stacklevel=4)
        return True

    def _memory(self, reason: str) -> sqlite3.Connection:
        """An in-memory database, holding a copy of the file's records when they can be read."""
        warn_once(f"tuning-db:{self.path}", f"{self.path}: tuning database {reason}; using one in "
                  "memory (results of this run are not kept)")
        self.in_memory = True
        conn = sqlite3.connect(":memory:", isolation_level=None)
        try:
            if self.path.is_file() and self.path.stat().st_size < _COPY_BELOW:
                source = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
                try:
                    source.backup(conn)
                finally:
                    source.close()
            conn.executescript(_SCHEMA)
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise _Damaged("copy")
        except (sqlite3.Error, OSError):
            conn.close()  # unreadable too: start empty
            conn = sqlite3.connect(":memory:", isolation_level=None)
            conn.executescript(_SCHEMA)
        return conn

    def _recover(self, err: sqlite3.DatabaseError) -> None:
        """After a query failed: a damaged file is moved aside and a fresh one opened; any other
        failure (read-only, disk full, I/O, locked past the timeout) continues in memory."""
        self._conn.close()
        if self.in_memory:
            self._conn = self._memory(f"failed in memory: {err}")
        elif _is_corrupt(err) and self._move_aside(err):
            self._conn = self._connect()
        else:
            self._conn = self._memory(f"failed: {err}")

    def _run(self, action: Callable[[sqlite3.Connection], _T], default: _T) -> _T:
        """`action` on the connection, retried once after recovering from a database error; if
        that fails too, `default` (a lost record or a miss, never a crash)."""
        for _ in range(2):
            try:
                return action(self._conn)
            except sqlite3.DatabaseError as err:
                self._recover(err)
        return default

    # -- the records ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (every write is already committed)."""
        self._conn.close()

    def record_measurement(self, workload: str, target: str, candidate: str,
                           predicted: float | None, measured: float | None) -> None:
        """measured None: the candidate failed (did not compile, crashed or timed out)."""
        row = (workload, target, COMPILER, candidate, predicted, measured, time.time())

        def insert(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        self._run(insert, None)

    def measurements(self, workload: str, target: str) -> dict[str, float | None]:
        """Every candidate measured for a workload on a target with this compiler."""
        return self._run(lambda conn: dict(conn.execute(
            "SELECT candidate, measured FROM measurements WHERE workload=? AND target=? AND compiler=?",
            (workload, target, COMPILER)).fetchall()), {})

    def record_plan(self, workload: str, target: str, mode: str, plan_json: str, report_json: str) -> None:
        """The plan a search chose, and its report."""
        row = (workload, target, COMPILER, mode, plan_json, report_json, time.time())

        def insert(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("INSERT OR REPLACE INTO plans VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        self._run(insert, None)

    def lookup_plan(self, workload: str, target: str, mode: str) -> tuple[str, str] | None:
        """(plan JSON, report JSON) recorded for a program, or None."""
        row = self._run(lambda conn: conn.execute(
            "SELECT plan, report FROM plans WHERE workload=? AND target=? AND compiler=? AND mode=?",
            (workload, target, COMPILER, mode)).fetchone(), None)
        return (row[0], row[1]) if row else None

    # -- sharing between machines ---------------------------------------------------------------

    def export_records(self) -> dict:
        """Every measurement and plan, of every compiler version, as JSON-ready data (`sft db
        export`): what a team or a cluster tunes once, for each machine of the same identity
        (the target key holds it) to replay."""
        def read(conn: sqlite3.Connection) -> dict:
            return {table: [dict(zip(_COLUMNS[table], row))
                            for row in conn.execute(f"SELECT {', '.join(_COLUMNS[table])} FROM {table}")]
                    for table in _COLUMNS}
        return {"format": EXPORT_FORMAT, "compiler": COMPILER, **self._run(read, {t: [] for t in _COLUMNS})}

    def import_records(self, data: dict, source: str = "<records>") -> dict[str, int]:
        """Merge what `export_records` wrote; returns counts of records "added", "replaced",
        "kept" (this database's was better) and "stale" (another IREE version: never replayed,
        left out). Where both have a record: for a measurement the faster measured wins (a
        failure loses to any time); for a plan, the one whose chosen candidate measured faster
        (verify's), else the newer. An SftError naming `source` where `data` is not an export."""
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise SftError("not a file `sft db export` wrote", source)
        try:
            incoming = {t: [tuple(r[c] for c in _COLUMNS[t]) for r in data.get(t, [])] for t in _COLUMNS}
        except (TypeError, KeyError) as err:
            raise SftError(f"a record lacks a field ({err})", source) from None
        counts = {"added": 0, "replaced": 0, "kept": 0, "stale": 0}

        def merge(conn: sqlite3.Connection) -> None:
            with conn:
                for table, rows in incoming.items():
                    key = _COLUMNS[table][:4]
                    for row in rows:
                        if row[2] != COMPILER:
                            counts["stale"] += 1
                            continue
                        where = " AND ".join(f"{c}=?" for c in key)
                        old = conn.execute(f"SELECT {', '.join(_COLUMNS[table])} FROM {table} WHERE {where}",
                                           row[:4]).fetchone()
                        if old is not None and not _better(table, row, old):
                            counts["kept"] += 1
                            continue
                        counts["replaced" if old else "added"] += 1
                        conn.execute(f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(row))})", row)
        self._run(merge, None)
        return counts


EXPORT_FORMAT = "sft-tuning-db-1"
_COLUMNS = {"measurements": ("workload", "target", "compiler", "candidate", "predicted", "measured", "created"),
            "plans": ("workload", "target", "compiler", "mode", "plan", "report", "created")}


def _better(table: str, new: tuple, old: tuple) -> bool:
    """Whether an imported record should replace the one held (same key)."""
    if table == "measurements":
        new_s, old_s = new[5], old[5]
        return new_s is not None and (old_s is None or new_s < old_s)
    new_s, old_s = _chosen_seconds(new[5]), _chosen_seconds(old[5])
    if new_s is not None and old_s is not None:
        return new_s < old_s
    return (new[6] or 0.0) > (old[6] or 0.0)


def _chosen_seconds(report_json: str) -> float | None:
    """The measured seconds of the candidate a verify report chose, or None (a model search)."""
    try:
        report = json.loads(report_json)
        seconds = report["measured_s"][f"program {report['chosen']}"]
        return float(seconds) if seconds is not None else None
    except (ValueError, TypeError, KeyError):
        return None
