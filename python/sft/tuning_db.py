"""The tuning database: what the search measured and chose, so that a second compile of the same
workload on the same target and compiler replays instead of searching.

SQLite in WAL mode: every write is one transaction, so a process killed mid-write leaves the
previous state intact, and two processes tuning at once wait for each other's writes (busy
timeout) instead of failing. A file that is not a valid database is moved aside (never deleted)
and a fresh one started.
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from importlib.metadata import version
from pathlib import Path

from .paths import cache_dir

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


class TuningDB:
    """Measurements keyed by (workload hash, target description hash, compiler version,
    candidate); chosen plans keyed by (program hash, target, compiler, search mode)."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else cache_dir() / "tuning.sqlite"
        try:
            self._conn = self._open()
        except sqlite3.DatabaseError as err:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.rename(aside)
            warnings.warn(f"{self.path}: not a valid tuning database ({err}); moved to {aside}, "
                          "starting a new one")
            self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
        return conn

    def close(self) -> None:
        self._conn.close()

    def record_measurement(self, workload: str, target: str, candidate: str,
                           predicted: float | None, measured: float | None) -> None:
        """measured None: the candidate failed (did not compile, crashed or timed out)."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?)",
                (workload, target, COMPILER, candidate, predicted, measured, time.time()))

    def measurements(self, workload: str, target: str) -> dict[str, float | None]:
        rows = self._conn.execute(
            "SELECT candidate, measured FROM measurements WHERE workload=? AND target=? AND compiler=?",
            (workload, target, COMPILER))
        return dict(rows.fetchall())

    def record_plan(self, workload: str, target: str, mode: str, plan_json: str, report_json: str) -> None:
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO plans VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (workload, target, COMPILER, mode, plan_json, report_json, time.time()))

    def lookup_plan(self, workload: str, target: str, mode: str) -> tuple[str, str] | None:
        row = self._conn.execute(
            "SELECT plan, report FROM plans WHERE workload=? AND target=? AND compiler=? AND mode=?",
            (workload, target, COMPILER, mode)).fetchone()
        return (row[0], row[1]) if row else None
