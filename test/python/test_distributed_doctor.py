"""The slow rank: `find_stragglers`' rule, the report, and `sft doctor --distributed` launched by
torchrun on 2 local ranks: an idle pair has no slow rank; with each rank pinned to a core of its
own and rank 1's shared with busy processes, rank 1 is named; a peer that never comes is an
error after the timeout, never a hang."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from sft import doctor
from sft.distributed.doctor import compare, json_path
from sft.distributed.stragglers import compare_ranks, find_stragglers
from sft.errors import SftError
from sft.tools.main import main

TIMEOUT = 300
# As in test_doctor: the machine is shared, other jobs load a core for seconds at a time, so a
# phase may be tried again; a real fault (a slow rank not seen, an idle one flagged) fails all.
ATTEMPTS = 3
# Rank 1's core shared with this many busy processes: an eighth of it is left. Its peer, rank 0,
# takes the load of other jobs, which the scheduler moves off the busy core: with two of them
# (seen on this VM) it keeps a third of its core, and rank 1 is still 2.7x slower.
SPINNERS = 7
# The slowed pair's ranks: each pins itself to one core, as a launcher's wrapper would
# (`taskset` per rank), then runs `sft doctor` with the arguments torchrun passes on. Rank 1
# starts the busy processes once its imports are done (so that they slow the timings, not the
# start), on its own core; they end when it does.
SLOWED = f"""
import os, subprocess, sys
cores = sorted(os.sched_getaffinity(0))
rank = int(os.environ["LOCAL_RANK"])
os.sched_setaffinity(0, {{cores[rank % len(cores)]}})
import torch.distributed, sft.distributed.doctor, sft.tools.main
spin = "import os\\nwhile os.getppid() == %d: pass" % os.getpid()
busy = [subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
        for _ in range({SPINNERS} if rank == 1 else 0)]
try:
    code = sft.tools.main.main(["doctor", *sys.argv[1:]])
finally:
    for p in busy:
        p.kill()
        p.wait()
sys.exit(code)
"""


# -- the rule ---------------------------------------------------------------------------------

def test_two_ranks_the_slower_by_the_threshold_is_the_straggler():
    assert find_stragglers({0: 1.0, 1: 1.4}, 1.5) == []
    assert find_stragglers({0: 1.0, 1: 1.6}, 1.5) == [1]
    assert find_stragglers({0: 1.6, 1: 1.0}, 1.5) == [0]
    assert find_stragglers({0: 1.0, 1: 1.5}, 1.5) == []  # "more than": at the threshold, not


def test_four_ranks_compare_each_with_the_median_of_the_others():
    assert find_stragglers({0: 1.0, 1: 1.1, 2: 0.9, 3: 1.05}) == []
    assert find_stragglers({0: 1.0, 1: 1.1, 2: 3.0, 3: 1.05}) == [2]
    # Two equally slow ranks: each one's peers are two fast ranks and the other slow one.
    assert find_stragglers({0: 1.0, 1: 3.0, 2: 3.0, 3: 1.0}) == [1, 2]
    times = {t.rank: t for t in compare_ranks({0: 1.0, 1: 1.0, 2: 4.0, 3: 2.0}, 1.5)}
    assert times[2].peers == 1.0 and times[2].vs_peers == 4.0 and times[2].straggler
    assert times[3].peers == 1.0 and times[3].straggler  # 2.0 > 1.5 x median(1, 1, 4)


def test_ties_are_never_stragglers():
    assert find_stragglers({0: 2.0, 1: 2.0}) == []
    assert find_stragglers({r: 0.5 for r in range(8)}, 1.0) == []


def test_a_rank_without_a_time_is_neither_a_straggler_nor_a_peer():
    assert find_stragglers({0: 1.0, 1: None}) == []
    assert find_stragglers({0: 1.0, 1: None, 2: 2.0}) == [2]
    assert find_stragglers({0: 1.0, 1: None, 2: 1.0, 3: 9.0}) == [3]
    lone = compare_ranks({0: 5.0, 1: None})
    assert lone[0].peers is None and lone[0].vs_peers is None and not lone[0].straggler
    assert find_stragglers({}) == [] and find_stragglers({0: 7.0}) == []


def test_the_expected_time_must_be_exceeded_too():
    # Slower than its peer, but within the model's prediction: the peer is fast, not it slow.
    assert find_stragglers({0: 1.0, 1: 2.0}, 1.5, expected=2.0) == []
    assert find_stragglers({0: 1.0, 1: 4.0}, 1.5, expected=2.0) == [1]
    # One prediction per rank (machines described differently); a rank missing: peers only.
    assert find_stragglers({0: 1.0, 1: 4.0, 2: 4.0}, 1.5, expected={1: 3.0, 2: 1.0}) == [2]
    assert find_stragglers({0: 1.0, 1: 4.0}, 1.5, expected={0: 1.0}) == [1]


@pytest.mark.parametrize("threshold", [0.9, float("nan")])
def test_a_threshold_below_1_is_an_error(threshold):
    with pytest.raises(SftError, match="must be at least 1"):
        find_stragglers({0: 1.0}, threshold)


# -- the report -------------------------------------------------------------------------------

def _device(seconds: dict, expected: float = 1e-3, threshold: float = 1.5):
    """A host's report with these times (None: the benchmark did not run), 1 ms predicted."""
    checks = []
    for name, s in seconds.items():
        ratio = None if s is None else s / expected
        verdict = "failed" if s is None else "slow" if ratio > threshold else "ok"
        checks.append(doctor.Check(name, name, "us/call", None if s is None else s * 1e6,
                                   expected * 1e6, s, expected, ratio, verdict,
                                   () if s is None else (s,)))
    return doctor.DeviceReport("host", "local-task", "test", tuple(checks),
                               doctor.device_verdict(checks))


def _rank(rank: int, **seconds):
    return {"rank": rank, "host": "h", "cores": (rank,), "basis": "given",
            "device": _device(seconds)}


def test_the_report_flags_a_rank_slower_than_its_peers_and_the_model():
    report = compare(1.5, [_rank(0, matmul=1e-3, copy=1e-3), _rank(1, matmul=4e-3, copy=1.2e-3)])
    assert [r.slow for r in report.ranks] == [(), ("matmul",)]
    assert report.exit_code == 2
    assert report.verdict == "slow rank: rank 1 on h (matmul 4.0x its peers, 4.0x predicted)"
    text = report.to_text()
    assert "SLOW RANK" in text and text.endswith(f"verdict: {report.verdict}")
    data = json.loads(report.to_json(1))
    assert data["rank"] == 1 and data["exit_code"] == 2 and data["ranks"][1]["slow"] == ["matmul"]


def test_the_report_all_ranks_slow_flags_none_and_a_failed_check_is_an_error():
    both = compare(1.5, [_rank(0, matmul=4e-3), _rank(1, matmul=4.1e-3)])
    assert both.exit_code == 0 and both.verdict.startswith("no slow rank")
    assert all(r.device.flagged for r in both.ranks)  # each still slower than predicted
    failed = compare(1.5, [_rank(0, matmul=1e-3), _rank(1, matmul=None)])
    assert failed.exit_code == 1 and failed.verdict == "rank 1: failed: matmul did not run"


def test_a_rank_is_slow_only_where_every_timing_found_it_slow():
    # The timings after the first, while a rank looks slow: another job that loaded rank 1's
    # core during the first timing has left by the second; rank 0 is slow in both.
    first = compare(1.5, [_rank(0, matmul=4e-3, copy=1e-3), _rank(1, matmul=1e-3, copy=4e-3)])
    assert [r.slow for r in first.ranks] == [("matmul",), ("copy",)]
    second = compare(1.5, [_rank(0, matmul=4e-3, copy=1e-3), _rank(1, matmul=1e-3, copy=1e-3)],
                     first)
    assert second.timings == 2 and [r.slow for r in second.ranks] == [("matmul",), ()]
    # Slow now but not before: not flagged either.
    third = compare(1.5, [_rank(0, matmul=1e-3, copy=1e-3), _rank(1, matmul=4e-3, copy=1e-3)],
                    second)
    assert third.timings == 3 and [r.slow for r in third.ranks] == [(), ()]
    assert third.exit_code == 0 and "timed 3x" in third.to_text()


def test_json_paths():
    assert json_path("r{rank}.json", 3) == "r3.json"
    assert json_path("-", 0) == "-" and json_path("-", 1) is None and json_path(None, 0) is None
    with pytest.raises(SftError, match="must hold {rank}"):
        json_path("report.json", 0)


def test_outside_torchrun_distributed_is_one_line(monkeypatch, capsys):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert main(["doctor", "--distributed"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("sft doctor: error: --distributed runs on every rank of a torchrun "
                          "launch") and "torchrun --nproc-per-node N" in err


# -- end to end under torchrun ----------------------------------------------------------------

def _torchrun(folder, slowed: bool):
    """`sft doctor --distributed` on 2 ranks, launched as the docs say, or each rank pinned to
    a core of its own and rank 1 slowed (`SLOWED`): (the process, each rank's JSON report)."""
    folder.mkdir()
    doctor_command = (["--no-python", sys.executable, "-c", SLOWED] if slowed
                      else ["-m", "sft.tools.doctor"])
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         *doctor_command, "--distributed", "--rounds", "2",
         "--json", str(folder / "rank{rank}.json")],
        capture_output=True, text=True, timeout=TIMEOUT)
    return proc, [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


def _seen(reports) -> str:
    return "; ".join(f"rank {r['rank']} " + ", ".join(
        f"{c['name']} {p if p is None else round(p, 2)}x peers ({len(c['rounds'])} rounds)"
        for c, p in zip(r["device"]["checks"], r["vs_peers"])) for r in reports[0]["ranks"])


@pytest.mark.xdist_group("loads-the-machine")  # never beside test_doctor's timings (README: --dist loadgroup)
def test_an_idle_pair_has_no_slow_rank_and_a_slowed_rank_1_is_named(tmp_path):
    # One test, idle first: run apart (pytest -n 2) the busy core would load the idle pair.
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, f"needs 2 cores, this process may use {cores}"
    seen = []
    for attempt in range(ATTEMPTS):
        # Unpinned: the scheduler moves the ranks away from other jobs' load.
        proc, reports = _torchrun(tmp_path / f"idle{attempt}", slowed=False)
        seen.append(_seen(reports))
        if proc.returncode == 0:
            break
    assert proc.returncode == 0, (seen, proc.stdout[-3000:], proc.stderr[-3000:])
    assert "verdict: no slow rank" in proc.stdout
    for rank, report in enumerate(reports):
        assert report["rank"] == rank and report["exit_code"] == 0 and report["world_size"] == 2
        assert [r["cores"] for r in report["ranks"]] == [cores, cores]

    seen = []
    for attempt in range(ATTEMPTS):
        proc, reports = _torchrun(tmp_path / f"slowed{attempt}", slowed=True)
        seen.append(_seen(reports))
        if [bool(r["slow"]) for r in reports[0]["ranks"]] == [False, True]:
            break
    # torchrun exits 1 when a rank exits nonzero, and lists each rank's status: 2, a slow rank.
    assert proc.returncode == 1 and "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]
    verdict = next(line for line in proc.stdout.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: slow rank: rank 1 on "), (seen, proc.stdout[-3000:])
    for rank, report in enumerate(reports):
        assert report["rank"] == rank and report["exit_code"] == 2
        assert [bool(r["slow"]) for r in report["ranks"]] == [False, True], seen
        assert [r["cores"] for r in report["ranks"]] == [[cores[0]], [cores[1]]]
        assert report["verdict"] == verdict.removeprefix("verdict: ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_peer_that_never_comes_is_an_error_after_the_timeout(tmp_path):
    # Rank 0 alone of 2, launched without torchrun (whose agent would stop it itself).
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sft.tools.main", "doctor", "--distributed",
                           "--rounds", "1", "--timeout", "1"], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sft doctor: error: rank 0: joining the process group failed"), last
    assert time.monotonic() - start < 120
