"""Child processes of the backend's tools: each in a process group of its own, killed whole when
it exits, times out or is interrupted (a tool leaves children behind when it is killed alone),
its output captured through files; timeouts read from the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile

from ..errors import SftError


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable `name`, `default` when it is unset or empty. Read
    at each call, so that a change takes effect without a restart."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise SftError(f"{name}={text!r} is not a positive number of seconds")
    return value


def kill_group(proc: subprocess.Popen) -> None:
    """Kill every process in the group of `proc` (started with start_new_session=True, so the
    group is its own) and reap `proc`. Tools leave children behind when they are killed alone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass
    proc.wait()


def run_group(cmd: list[str], timeout: float, env: dict | None = None,
              cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run a tool in a process group of its own, its output captured as text. The group is
    killed once the tool exits (stragglers) and when it runs past `timeout`, which then raises
    subprocess.TimeoutExpired. Output goes to files, not pipes: a child still holding a pipe
    could keep a reader waiting after the tool itself is gone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, env=env, cwd=cwd)
        try:
            proc.wait(timeout)
        finally:  # on timeout, on an interrupt, and after a normal exit alike
            kill_group(proc)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def run_attached(cmd: list[str], timeout: float | None = None) -> int:
    """Run a tool on the caller's stdout and stderr (its progress shows as it goes) in a process
    group of its own, killed when the tool exits, on an interrupt and past `timeout` (which then
    raises subprocess.TimeoutExpired); its exit code."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout)
    finally:
        kill_group(proc)


def exit_text(code: int) -> str:
    """How a process ended, in words: `exit code 3`, `killed by SIGSEGV`."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"
