"""Processes the backend starts: timing workers (never importing the user's script, never hung
on), iree-compile and its timeout, and the NaN guard of verify. No timing is asserted but the
bounds that show nothing was waited for."""

import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sft.backend import iree
from sft.backend.bench import _tool
from sft.backend.timing import time_in_processes, time_together, time_variants
from sft.errors import SftError
from sft.measure import non_finite_candidates
from sft.targets import get_target

SLACK = 30.0  # seconds on top of a timeout: worker start-up on a loaded 2-core machine


# Builders: they run in the timing workers, which import this module by name (its folder is on
# the parent's sys.path, which the workers get). Each returns the callable to time.
def _good():
    return lambda: np.ones(3)


def _nan():
    return lambda: np.array([1.0, np.nan])


def _chatty():
    """Prints on stdout while building and on every call: the answers must not be garbled."""
    print("building", flush=True)
    return lambda: print('{"time": -1}', flush=True)


def _exits_before_ready():
    os._exit(3)


def _exits_after_first_round():
    calls = []

    def run():
        calls.append(1)
        if len(calls) > 2:  # the warm-up call, round one, then out during round two
            os._exit(4)
    return run


def _segfaults():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file left behind
    os.kill(os.getpid(), signal.SIGSEGV)


def _raises():
    raise RuntimeError("builder exploded")


def _allocates_absurdly():
    return bytearray(1 << 62)  # beyond any address space: fails at once, touches nothing


def _hangs_building(pid_file: str):
    """Starts a grandchild first, which must die with the worker's process group."""
    child = subprocess.Popen(["sleep", "1000"])
    with open(pid_file, "w") as f:
        f.write(str(child.pid))
    time.sleep(1e6)


def _hangs_in_round_two():
    calls = []

    def run():
        calls.append(1)
        if len(calls) > 2:
            time.sleep(1e6)
    return run


def _gone(pid: int, wait: float = 10.0) -> bool:
    """Whether process `pid` exits (or is a zombie, dead but for its parent's reaping) within
    `wait` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_faults_are_recorded_failed_and_the_others_timed():
    timeout = 120.0  # not reached: deaths are seen at once
    builders = {"good": (_good, ()), "nan": (_nan, ()), "chatty": (_chatty, ()),
                "exits before ready": (_exits_before_ready, ()),
                "exits after round one": (_exits_after_first_round, ()),
                "segfaults": (_segfaults, ()), "raises": (_raises, ()),
                "allocates": (_allocates_absurdly, ())}
    start = time.monotonic()
    results = time_variants(builders, rounds=2, calls=1, timeout=timeout, settle=0.0)
    assert time.monotonic() - start < SLACK
    for name in ("good", "nan", "chatty"):
        assert results[name].error is None and results[name].seconds > 0, results[name]
    assert results["good"].finite is True and results["nan"].finite is False
    assert results["chatty"].finite is None  # returns nothing to check
    failed = {name: results[name] for name in builders if name not in ("good", "nan", "chatty")}
    for name, result in failed.items():
        assert result.seconds is None and result.error, name
    assert "exit code 3" in failed["exits before ready"].error
    assert "exit code 4" in failed["exits after round one"].error
    assert "SIGSEGV" in failed["segfaults"].error
    assert "builder exploded" in failed["raises"].error
    assert "MemoryError" in failed["allocates"].error
    medians, errors = time_in_processes({"good": (_good, ()), "raises": (_raises, ())}, 1, 1,
                                        timeout=timeout, settle=0.0)
    assert medians["good"] > 0 and medians["raises"] is None
    assert set(errors) == {"raises"}


def _records_pid(path):
    """Appends its process's id to `path` when built; each call sleeps a little."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return lambda: time.sleep(0.002)


def _slow_in_its_first_process(path):
    """Sleeps 8 ms a call in the first process that builds it, 2 ms in any other."""
    try:  # created by one process only, however close together they build
        os.close(os.open(path, os.O_CREAT | os.O_EXCL))
        first = True
    except FileExistsError:
        first = False
    return lambda: time.sleep(0.008 if first else 0.002)


def test_time_together_reports_the_slowest_process_beside_the_mean(tmp_path):
    """A candidate is ranked at its slower process's median (`Timing.worst`): a process's
    luck with IREE's parallel executor lasts its life, and one lucky process must not pick."""
    results = time_together({"luck": (_slow_in_its_first_process, (str(tmp_path / "luck"),))},
                            rounds=2, calls=2, processes=2, timeout=120.0, settle=0.0)
    luck = results["luck"]
    assert luck.worst >= 0.008 and 0.004 <= luck.seconds < luck.worst


def test_time_together_hosts_every_variant_in_each_process_and_fails_only_the_culprit(tmp_path):
    """Candidates ranked together: each process hosts all of them (so a process's luck is
    shared), one that raises fails alone, and where one kills its process the others are timed
    again, each in a process of its own."""
    a, b = tmp_path / "a", tmp_path / "b"
    builders = {"a": (_records_pid, (str(a),)), "b": (_records_pid, (str(b),)),
                "nan": (_nan, ()), "raises": (_raises, ())}
    start = time.monotonic()
    results = time_together(builders, rounds=2, calls=2, processes=2, timeout=120.0, settle=0.0)
    assert time.monotonic() - start < SLACK
    pids = set(a.read_text().split())
    assert len(pids) == 2 and pids == set(b.read_text().split())  # both variants in both
    assert results["a"].seconds >= 0.002 and results["b"].seconds >= 0.002
    assert results["nan"].finite is False and results["nan"].seconds > 0
    assert results["raises"].seconds is None and "builder exploded" in results["raises"].error
    crashed = time_together({"a": (_records_pid, (str(a),)), "segfaults": (_segfaults, ()),
                             "good": (_good, ())}, rounds=2, calls=1, timeout=120.0, settle=0.0)
    assert crashed["a"].seconds >= 0.002 and crashed["good"].seconds > 0
    assert crashed["segfaults"].seconds is None and "SIGSEGV" in crashed["segfaults"].error
    # built in the first shared process (before the crasher), not in the second (which loads in
    # reverse order and died first), then in a process of its own
    assert len(set(a.read_text().split())) == 2 + 1 + 1


def test_time_in_processes_takes_each_variant_in_as_many_processes_as_asked(tmp_path):
    a = tmp_path / "a"
    medians, errors = time_in_processes({"a": (_records_pid, (str(a),)), "raises": (_raises, ())},
                                        rounds=2, calls=1, timeout=120.0, settle=0.0, processes=3)
    assert len(set(a.read_text().split())) == 3 and medians["a"] >= 0.002
    assert medians["raises"] is None and "builder exploded" in errors["raises"]


@pytest.mark.parametrize("where", ["building", "round two"])
def test_a_hung_worker_is_killed_with_its_group_within_the_timeout(where, tmp_path, monkeypatch):
    # read at call time: no timeout passed below. 12 s, not less: the good worker's start (a
    # Python importing sft and this module, 1.4 s idle) took over 4 s in a loaded CI run
    monkeypatch.setenv("SFT_RUN_TIMEOUT", "12")
    pid_file = tmp_path / "grandchild.pid"
    hung = (_hangs_building, (str(pid_file),)) if where == "building" else (_hangs_in_round_two, ())
    start = time.monotonic()
    results = time_variants({"good": (_good, ()), "hangs": hung}, rounds=2, calls=1, settle=0.0)
    assert time.monotonic() - start < 12.0 + SLACK
    assert results["good"].seconds is not None and results["good"].seconds > 0, results["good"].error
    assert results["hangs"].seconds is None and "no answer within 12 s" in results["hangs"].error
    if where == "building":
        assert _gone(int(pid_file.read_text()))


def test_a_builder_from_main_is_refused():
    script = {"__name__": "__main__"}
    exec("def build():\n    return lambda: None\n", script)  # defined as a script would
    with pytest.raises(SftError, match="__main__"):
        time_in_processes({"mine": (script["build"], ())}, 1, 1)
    with pytest.raises(SftError, match="module-level"):
        time_in_processes({"lambda": (lambda: (lambda: None), ())}, 1, 1)


def test_a_top_level_script_compiles_with_verify(top_level_script):
    """The bug: the script has no __main__ guard; workers that imported it re-ran its compile."""
    out = top_level_script("""
        import torch
        import sft

        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        x = torch.randn(2, 8)
        compiled = sft.compile(model, (x,), search="verify")
        with torch.no_grad():
            expected = model(x)
        got = compiled(x)
        print("close", torch.allclose(got, expected, rtol=1e-4, atol=1e-5))
        print("timed", compiled.search.measured["program iree-default"] > 0)
    """)
    assert "close True" in out and "timed True" in out, out


def _fake_tool(tmp_path, body: str) -> str:
    path = tmp_path / "iree-compile"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_hung_iree_compile_is_killed_with_its_children(tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("SFT_IREE_COMPILE", _fake_tool(tmp_path, f"sleep 1000 &\necho $! > {pid_file}\nwait\n"))
    monkeypatch.setenv("SFT_COMPILE_TIMEOUT", "2")
    start = time.monotonic()
    with pytest.raises(SftError, match="iree-compile timed out after 2 s"):
        iree.compile_module(f"// never cached: {tmp_path}\n", get_target("host"))
    assert time.monotonic() - start < 2.0 + SLACK
    assert _gone(int(pid_file.read_text()))


def test_a_crashing_iree_compile_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SFT_IREE_COMPILE", _fake_tool(tmp_path, "ulimit -c 0\nkill -SEGV $$\n"))
    with pytest.raises(SftError, match=r"iree-compile crashed \(killed by SIGSEGV\)"):
        iree.compile_module(f"// never cached: {tmp_path}\n", get_target("host"))


def test_missing_tools_and_bad_timeouts_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("SFT_IREE_COMPILE", str(tmp_path / "nowhere"))
    with pytest.raises(SftError, match="SFT_IREE_COMPILE"):
        iree.compile_module(f"// never cached: {tmp_path}\n", get_target("host"))
    with pytest.raises(SftError, match="iree-benchmark-nothing not found"):
        _tool("iree-benchmark-nothing")
    for name, read in (("SFT_COMPILE_TIMEOUT", iree.compile_timeout),
                       ("SFT_RUN_TIMEOUT", iree.run_timeout)):
        monkeypatch.setenv(name, "soon")
        with pytest.raises(SftError, match=name):
            read()
        monkeypatch.setenv(name, "-1")
        with pytest.raises(SftError, match=name):
            read()
        monkeypatch.setenv(name, "7.5")
        assert read() == 7.5
        monkeypatch.delenv(name)
    assert iree.compile_timeout() == 600.0 and iree.run_timeout() == 120.0


def test_verify_drops_candidates_that_compute_nan_where_iree_does_not():
    finite = {"iree-default": True, "data-tiling": False, "ukernels": True, "unknown": None}
    assert non_finite_candidates(finite) == {"data-tiling"}
    # Where IREE's default is not finite either (or unknown), the inputs may call for NaN.
    assert non_finite_candidates({**finite, "iree-default": False}) == set()
    assert non_finite_candidates({**finite, "iree-default": None}) == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="sft's low-priority invoker runs on Linux only (elsewhere a nice value "
                           "is the whole process's, so calls stay on the caller's thread)")
def test_parallel_executor_calls_wait_on_a_low_priority_thread():
    """A call on IREE's parallel executor is made from sft's invoker thread at nice 19 (its
    waits must not take the workers' cores), errors come back to the caller, and a call made
    from that thread runs there directly; the results are those of the inline driver."""
    import threading

    import torch

    import sft
    from sft.backend import runtime

    def where(*args):
        return threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, 0), args

    name, nice, args = runtime._invoke(where, (1, 2))
    assert name.startswith("sft-invoke") and nice == 19 and args == (1, 2)
    assert os.getpriority(os.PRIO_PROCESS, 0) < 19  # the caller's own priority is untouched
    assert runtime._invoke(lambda: runtime._invoke(where, ())[0], ()).startswith("sft-invoke")

    def fails():
        raise RuntimeError("no")
    with pytest.raises(RuntimeError, match="no"):
        runtime._invoke(fails, ())

    model, x = torch.nn.Linear(64, 32), torch.randn(8, 64)
    parallel = sft.compile(model, (x,), plan=sft.Plan(driver="local-task"))
    inline = sft.compile(model, (x,), plan=sft.Plan(driver="local-sync"))
    torch.testing.assert_close(parallel(x), inline(x))
    torch.testing.assert_close(parallel(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="sft's low-priority invoker runs on Linux only")
@pytest.mark.parametrize("from_s, waits_apart", [(0.0, True), (3600.0, False)])
def test_a_module_waits_through_the_invoker_only_where_its_first_calls_were_long(
        monkeypatch, from_s, waits_apart):
    """The first calls run on the caller's thread; where the fastest of them took at least
    INVOKER_FROM_S, later calls wait on the invoker thread, else they stay (the hand-over costs
    more than a short call's waiter), and the choice does not change back and forth."""
    import threading

    import torch

    import sft
    from sft.backend import runtime

    monkeypatch.setattr(runtime, "INVOKER_FROM_S", from_s)
    model, x = torch.nn.Linear(64, 32), torch.randn(8, 64)
    parallel = sft.compile(model, (x,), plan=sft.Plan(driver="local-task"))
    loaded = parallel._device()
    threads, invoke = [], loaded._vm_invoke

    def recorded(*args):
        threads.append(threading.current_thread().name)
        return invoke(*args)
    loaded._vm_invoke = recorded
    for _ in range(runtime.INVOKER_AFTER + 3):
        torch.testing.assert_close(parallel(x), model(x), rtol=1e-5, atol=1e-5)
    first, later = threads[:runtime.INVOKER_AFTER], threads[runtime.INVOKER_AFTER:]
    assert first == [threading.current_thread().name] * runtime.INVOKER_AFTER
    assert len(set(later)) == 1 and later[0].startswith("sft-invoke") == waits_apart
