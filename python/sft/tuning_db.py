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

import os
import sqlite3
import time
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Callable, TypeVar

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
