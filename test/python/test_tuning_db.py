"""The tuning database: replay, concurrent writers, a writer killed mid-way, a corrupt file."""

import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import sft
from sft.models import SUITE
from sft.tuning_db import TuningDB


def _writer(path, tag, count):
    db = TuningDB(path)
    for i in range(count):
        db.record_measurement(f"w{tag}", "t", f"c{i}", 1.0, float(i))
    db.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "db.sqlite"
    TuningDB(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, 200)) for tag in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = TuningDB(path)
    assert len(db.measurements("w0", "t")) == 200 and len(db.measurements("w1", "t")) == 200


def test_a_writer_killed_mid_write_leaves_a_sound_database(tmp_path):
    path = tmp_path / "db.sqlite"
    code = ("import sys; from sft.tuning_db import TuningDB; db = TuningDB(sys.argv[1]); i = 0\n"
            "while True:\n    db.record_measurement('w', 't', f'c{i}', 1.0, 2.0); i += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    deadline = time.time() + 30
    while time.time() < deadline:
        time.sleep(0.5)
        if path.exists() and TuningDB(path).measurements("w", "t"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    db = TuningDB(path)
    rows = db.measurements("w", "t")
    assert rows and all(v == 2.0 for v in rows.values())
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


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
