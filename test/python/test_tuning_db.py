"""The tuning database: replay, concurrent writers, a writer killed mid-way, a corrupt file
(at open or found later), a database that cannot be written."""

import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
import torch

import sft
from sft import paths, tuning_db
from sft.models import SUITE
from sft.tuning_db import TuningDB


WRITER = """import sys
from sft.tuning_db import TuningDB
db = TuningDB(sys.argv[1])
for i in range(int(sys.argv[3])):
    db.record_measurement(sys.argv[2], "t", f"c{i}", 1.0, float(i))
    print(i, flush=True)  # after the commit: this record is in the database
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "db.sqlite"
    TuningDB(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{tag}", "400"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for tag in (0, 1)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    db = TuningDB(path)
    for tag in (0, 1):
        assert db.measurements(f"w{tag}", "t") == {f"c{i}": float(i) for i in range(400)}
    assert not db.in_memory


def test_a_writer_killed_mid_write_keeps_every_committed_record(tmp_path):
    path = tmp_path / "db.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "w", "1000000"],
                            stdout=subprocess.PIPE, text=True)
    committed = -1
    while committed < 300:  # well into the loop, then killed between or inside writes
        committed = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    committed = max([committed, *(int(line) for line in proc.stdout.read().split())])
    db = TuningDB(path)
    rows = db.measurements("w", "t")
    assert all(rows[f"c{i}"] == float(i) for i in range(committed + 1))
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _filled(path, count=2000):
    db = TuningDB(path)
    for i in range(count):
        db.record_measurement("w", "t", f"c{i}", 1.0, 2.0)
    db.record_plan("p", "t", "model", "{}", "{}")
    db.close()  # checkpointed: everything is in the main file


def _damage_past_first_page(path):
    size = path.stat().st_size
    assert size > 3 * 4096
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(b"\xde\xad" * ((size - 4096) // 2))


def test_damage_past_the_first_page_is_found_at_open(tmp_path):
    path = tmp_path / "db.sqlite"
    _filled(path)
    _damage_past_first_page(path)
    with pytest.warns(UserWarning, match="not a valid tuning database"):
        db = TuningDB(path)
    assert db.lookup_plan("p", "t", "model") is None and db.measurements("w", "t") == {}
    db.record_plan("p", "t", "model", "{}", "{}")
    assert db.lookup_plan("p", "t", "model") == ("{}", "{}") and not db.in_memory
    assert len(list(tmp_path.glob("db.sqlite.corrupt-*"))) == 1


def test_damage_found_by_a_query_moves_the_file_aside_and_starts_fresh(tmp_path, monkeypatch):
    path = tmp_path / "db.sqlite"
    _filled(path)
    _damage_past_first_page(path)
    monkeypatch.setattr(tuning_db, "_CHECK_BELOW", 0)  # as for a database too big to check at open
    db = TuningDB(path)
    with pytest.warns(UserWarning, match="not a valid tuning database"):
        assert db.measurements("w", "t") == {}  # no stale rows, no DatabaseError
    db.record_measurement("w", "t", "new", 1.0, 3.0)
    assert db.measurements("w", "t") == {"new": 3.0}
    assert TuningDB(path).measurements("w", "t") == {"new": 3.0}  # a sound file again
    assert len(list(tmp_path.glob("db.sqlite.corrupt-*"))) == 1


def _forget_warnings(monkeypatch):
    monkeypatch.setattr(paths, "_warned", set())


def test_an_unwritable_database_degrades_to_memory_before_any_search(tmp_path, monkeypatch):
    _forget_warnings(monkeypatch)
    path = tmp_path / "db.sqlite"
    _filled(path, 10)
    before = path.read_bytes()
    real_access = os.access
    monkeypatch.setattr(tuning_db.os, "access",
                        lambda p, mode: False if mode & os.W_OK else real_access(p, mode))
    with pytest.warns(UserWarning, match="cannot be written; using one in memory"):
        db = TuningDB(path)
    assert db.in_memory and db.lookup_plan("p", "t", "model") == ("{}", "{}")  # what it had
    db.record_plan("q", "t", "model", "{}", "{}")
    assert db.lookup_plan("q", "t", "model") == ("{}", "{}")
    assert path.read_bytes() == before


def test_a_database_in_a_folder_that_is_a_file_degrades_to_memory(tmp_path, monkeypatch):
    _forget_warnings(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(UserWarning, match="using one in memory"):
        db = TuningDB(blocker / "db.sqlite")
    db.record_measurement("w", "t", "c", 1.0, 2.0)
    assert db.measurements("w", "t") == {"c": 2.0} and blocker.read_text() == "x"


def test_a_database_that_turns_read_only_on_write_degrades_to_memory(tmp_path, monkeypatch):
    _forget_warnings(monkeypatch)
    path = tmp_path / "db.sqlite"
    db = TuningDB(path)
    db.record_measurement("w", "t", "a", 1.0, 1.0)
    db._conn.execute("PRAGMA query_only=ON")  # writes now fail with SQLITE_READONLY
    with pytest.warns(UserWarning, match="readonly"):
        db.record_measurement("w", "t", "b", 1.0, 2.0)
    assert db.in_memory and db.measurements("w", "t") == {"a": 1.0, "b": 2.0}
    assert TuningDB(path).measurements("w", "t") == {"a": 1.0}  # the file is untouched, not moved


def test_a_corrupt_database_is_moved_aside_not_lost(tmp_path):
    path = tmp_path / "db.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.warns(UserWarning, match="not a valid tuning database"):
        db = TuningDB(path)
    db.record_plan("w", "t", "model", "{}", "{}")
    assert db.lookup_plan("w", "t", "model") == ("{}", "{}")
    kept = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not sqlite")


def test_a_searched_plan_replays_from_the_database():
    case = SUITE["mlp"]
    model, inputs = case.build(), case.inputs()
    first = sft.compile(model, inputs, search="model")
    second = sft.compile(model, inputs, search="model")
    assert second.plan == first.plan
    assert second.search.replayed and "replayed" in second.search.to_text()
    with torch.no_grad():
        expected = model(*inputs).numpy()
    np.testing.assert_allclose(second(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_export_and_import_merge_by_the_faster_measured(tmp_path, capsys):
    """sft db export / import: a team tunes once. Where both databases hold a record, the
    faster measurement wins (a failure loses to any time), a verify plan whose choice measured
    faster wins, and records of another IREE version are left out."""
    import json

    from sft.tools.main import main as sft_main
    from sft.tuning_db import COMPILER

    ours, theirs = TuningDB(tmp_path / "ours.sqlite"), TuningDB(tmp_path / "theirs.sqlite")
    ours.record_measurement("w", "t", "fast-here", 1.0, 1e-3)
    theirs.record_measurement("w", "t", "fast-here", 1.0, 2e-3)   # slower: ours kept
    ours.record_measurement("w", "t", "failed-here", 1.0, None)
    theirs.record_measurement("w", "t", "failed-here", 1.0, 5e-3)  # a time beats a failure
    theirs.record_measurement("w", "t", "new", 1.0, 4e-3)
    report = lambda s: json.dumps({"chosen": "a", "measured_s": {"program a": s}})  # noqa: E731
    ours.record_plan("w", "t", "verify", '{"driver": "x"}', report(3e-3))
    theirs.record_plan("w", "t", "verify", '{"driver": "y"}', report(1e-3))  # faster: taken
    for db in (ours, theirs):
        db.close()
    out = tmp_path / "theirs.json"
    assert sft_main(["db", "export", str(out), "--db", str(tmp_path / "theirs.sqlite")]) == 0
    data = json.loads(out.read_text())
    data["measurements"].append({**data["measurements"][0], "compiler": "iree-0.0", "candidate": "old"})
    out.write_text(json.dumps(data))
    assert sft_main(["db", "import", str(out), "--db", str(tmp_path / "ours.sqlite")]) == 0
    assert "1 added, 2 replaced, 1 kept, 1 stale" in capsys.readouterr().out
    merged = TuningDB(tmp_path / "ours.sqlite")
    assert merged.measurements("w", "t") == {"fast-here": 1e-3, "failed-here": 5e-3, "new": 4e-3}
    assert merged.lookup_plan("w", "t", "verify")[0] == '{"driver": "y"}'
    assert COMPILER != "iree-0.0"
    out.write_text('{"format": "something else"}')
    assert sft_main(["db", "import", str(out), "--db", str(tmp_path / "ours.sqlite")]) == 1
    assert "not a file `sft db export` wrote" in capsys.readouterr().err
    out.write_text("{")
    assert sft_main(["db", "import", str(out)]) == 1
    assert "not JSON" in capsys.readouterr().err
