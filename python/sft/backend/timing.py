"""Timing Python callables side by side, taking turns: each in a process of its own
(`time_variants`), or all of them in each of a few processes (`time_together`).

A process per variant keeps variants from sharing thread pools, allocator state or load order
(a benchmark's frameworks and compilers); taking turns round after round makes all variants see
the same machine load; medians over rounds. Candidates of one compiler are ranked together in
each process instead: a process's luck with IREE's executor (up to 1.55x for its whole life on a
2-core VM) is shared by everything in it.

The processes are `python -m sft.backend.worker` (its protocol is in that module), not
multiprocessing children: a spawned multiprocessing child imports the caller's `__main__`, and a
user script that compiles at top level ran its compile again in every worker, which failed and
left the parent blocked for ever. Each worker is a process group of its own; a worker that dies,
hangs or runs past its timeout, at any point, has its whole group killed and is recorded as
failed, never waited for.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import SftError
from .iree import run_timeout
from .process import exit_text, kill_group


def loaded_call(artifact, driver: str, arrays: list, keep: tuple[int, ...] = (),
                resident: tuple[int, ...] = (), storage: tuple = (), split: tuple = (),
                layout=None, entry: str = "main", held: dict[int, int] | None = None):
    """A builder for `time_in_processes`: the compiled module loaded on `driver`, called on
    `arrays` as a compiled model is called: the arguments at positions `resident` (the model's
    state, donated inputs) are uploaded to the device once, the results at positions `keep` (a
    training step's updated state) stay there, the others come back to the host; a buffer of
    each (shape, dtype) of `storage` is passed after them, for IREE to write a result into
    (`passes.output_storage`). A module for a part of the batch (`split`: parts, batched
    arguments) runs its parts side by side, as `layout` says (`passes.split_batch.SplitLayout`).
    The arguments `held` names (position -> panel width: `passes.hold_transposed.holding`) are
    passed as a plan holding them takes them (transposed, and packed where the width is not 0)."""
    from .parts import PartsLoaded
    from .runtime import load, to_host

    held = held or {}
    fn = (PartsLoaded(artifact, entry, split[0], layout, held) if split
          else load(artifact, entry, driver))
    if held:
        from ..passes.hold_transposed import held_array

        arrays = [held_array(a, held[i]) if i in held else a for i, a in enumerate(arrays)]
    arrays = [fn.upload(a) if i in resident else a for i, a in enumerate(arrays)]
    arrays += [fn.allocate(shape, dtype) for shape, dtype in storage]

    def call():
        outs = fn.call_on_device(*arrays)
        return [out if i in keep else to_host(out) for i, out in enumerate(outs)]
    return call


@dataclass
class Timing:
    """What timing one variant found."""

    seconds: float | None = None  # median seconds per call; None where the variant failed
    # the slowest of its processes' medians (`time_together`: a process's luck with IREE's
    # parallel executor lasts its life; a pick must not rest on one lucky process)
    worst: float | None = None
    error: str | None = None      # why it failed
    finite: bool | None = None    # whether its warm-up call's outputs were all finite (None:
    # it returned no arrays, or never got that far)


class _Fault(Exception):
    """A worker that died, hung or answered nonsense (recorded, never raised to the caller)."""


def _check_builder(name, build) -> None:
    """Builders travel to the worker by reference (module and name), so they must be importable
    there; the caller's `__main__` never is (importing it would run the caller's script)."""
    module = getattr(build, "__module__", None)
    qualname = getattr(build, "__qualname__", "")  # (a callable object has none: pickle judges)
    if module == "__main__":
        raise SftError(f"timing variant {name!r}: its builder {qualname} is defined in __main__; "
                       "timing workers never import the caller's script, so a builder must be a "
                       "module-level function of an importable module")
    if "<" in qualname:  # <lambda>, <locals>: pickled by name, they cannot be found by it
        raise SftError(f"timing variant {name!r}: its builder {module}.{qualname} is not a "
                       "module-level function (workers import builders by name)")


def _worker_env() -> dict:
    """The worker's environment: `-m sft.backend.worker` must find this sft before the request
    (with the parent's sys.path) is read. A checkout run without installing needs its folder on
    PYTHONPATH; an installed sft is found anyway, and its site-packages is not put there (it
    would go before the standard library)."""
    import site

    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in sites:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class _Worker:
    """One worker process: commands on its stdin, JSON answers on its stdout, its stderr in a
    file (quoted when it fails, never a pipe that could fill and stall it)."""

    def __init__(self, request: Path, log: Path, env: dict):
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "sft.backend.worker", str(request)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=env, start_new_session=True)
        self._buffer = b""

    def send(self, command: str) -> None:
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Fault(self._death()) from None

    def answer(self, timeout: float) -> dict:
        """The next answer, waited for at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Fault(f"no answer within {timeout:g} s")
            # At most a second at a time: a dead worker whose stdout lives on in a child of its
            # own reads as no end of file, so its exit is polled for as well.
            readable, _, _ = select.select([fd], [], [], min(left, 1.0))
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:  # end of file: the worker is gone
                    raise _Fault(self._death())
                self._buffer += chunk
            elif self.proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
                raise _Fault(self._death())  # (its last words, if any, are read first)
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise _Fault(f"the worker answered {line[:200]!r}")
        if "error" in answer:
            raise _Fault(str(answer["error"]))
        return answer

    def _death(self) -> str:
        try:
            how = exit_text(self.proc.wait(5))
        except subprocess.TimeoutExpired:  # closed its stdout but lives on: killed later
            how = "output closed"
        tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        return f"the worker died ({how})" + (": " + " | ".join(tail) if tail else "")

    def stop(self, grace: float) -> None:
        """Ask the worker to end, give it `grace` seconds, then kill what is left of its group."""
        try:
            self.send("stop")
            self.proc.wait(grace)
        except (_Fault, subprocess.TimeoutExpired):
            pass
        self.kill()

    def kill(self) -> None:
        kill_group(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def time_variants(builders: dict, rounds: int, calls: int, timeout: float | None = None,
                  settle: float = 0.2) -> dict:
    """Time each `name -> (build, args)` in a worker process of its own: `build(*args)` runs
    there and returns the callable to time, called once to warm up, then `calls` times a round
    for `rounds` rounds, the variants taking turns. Returns name -> `Timing`.

    `timeout` (default `run_timeout()`, $SFT_RUN_TIMEOUT) bounds each answer: the build with its
    warm-up, and each round. A variant whose build or call raises, whose worker dies or that
    does not answer in time gets seconds None and its error; its process group is killed. Between
    turns the machine gets `settle` seconds, so that threads still spinning after one variant's
    turn (OpenMP's spin-wait, IREE's workers) do not steal from the next. A builder defined in
    `__main__`, or not at module level, is refused with SftError before anything starts."""
    return _timed(builders, [[name] for name in builders], rounds, calls, timeout, settle)[0]


def time_together(builders: dict, rounds: int, calls: int, processes: int = 2,
                  timeout: float | None = None, settle: float = 0.05) -> dict:
    """Time every `name -> (build, args)` in each of `processes` worker processes, the variants
    taking turns within each (each round starting one later; every other process loads them in
    reverse order); seconds: the mean over the processes of each one's median. Returns name ->
    `Timing`, as `time_variants` does.

    For ranking candidates: on a 2-core Zen 4 VM one process ran IREE's parallel executor 1.55x
    slower than the next for its whole life (mlp_b128's step: 2.9-3.0 ms in four processes,
    4.5-4.6 in two), while two modules in one process kept their ratio within 4% in every one
    (the same module loaded twice: 0.985-1.039). A process's luck is shared by what runs in it,
    so candidates compared inside one are compared fairly. A variant that raises fails alone;
    the variants of a process that dies or hangs (a crash of any of them) are timed again, each
    in a process of its own (`time_variants`)."""
    names = list(builders)
    groups = [names if p % 2 == 0 else names[::-1] for p in range(processes)]
    results, lost = _timed(builders, groups, rounds, calls, timeout, settle)
    if lost:
        results.update(time_variants({n: builders[n] for n in names if n in lost}, rounds, calls, timeout))
    return results


def _timed(builders: dict, groups: list, rounds: int, calls: int, timeout: float | None,
           settle: float) -> tuple[dict, set]:
    """Time `builders` in one worker process per group (a list of names each hosts, in load
    order), taking turns round after round: (name -> Timing, the names of the workers that died
    or hung). A variant's seconds: the mean over its workers of each one's median."""
    timeout = run_timeout() if timeout is None else timeout
    for name, (build, _) in builders.items():
        _check_builder(name, build)
    results = {name: Timing() for name in builders}
    samples: dict = {(w, name): [] for w, group in enumerate(groups) for name in group}
    workers: dict = {}
    lost: set = set()

    def fail(name, error: str) -> None:
        if results[name].error is None:
            results[name].error = error

    def died(w, error: str) -> None:
        for name in groups[w]:
            fail(name, error)
        lost.update(groups[w])
        workers.pop(w).kill()

    with tempfile.TemporaryDirectory(prefix="sft-timing-") as tmp:
        env = _worker_env()
        try:
            # Requests are files: module bytes and input arrays never go through a pipe that
            # a dead reader would leave the parent blocked on.
            for w, group in enumerate(groups):
                request = Path(tmp, f"request{w}.pkl")
                with open(request, "wb") as f:
                    pickle.dump(list(sys.path), f)
                    pickle.dump({"calls": calls, "count": len(group)}, f)
                    for name in group:
                        build, args = builders[name]
                        try:
                            pickle.dump((build, tuple(args)), f, protocol=pickle.HIGHEST_PROTOCOL)
                        except (pickle.PicklingError, TypeError, AttributeError) as e:
                            raise SftError(f"timing variant {name!r}: its builder or arguments "
                                           f"cannot be sent to a worker: {e}") from None
                try:
                    workers[w] = _Worker(request, Path(tmp, f"worker{w}.log"), env)
                except OSError as e:
                    for name in group:
                        fail(name, f"the worker could not be started: {e}")
            for w in list(workers):
                try:
                    ready = workers[w].answer(timeout)
                except _Fault as e:
                    died(w, str(e))
                    continue
                for i, name in enumerate(groups[w]):
                    if str(i) in ready.get("failed", {}):
                        fail(name, ready["failed"][str(i)])
                    ok = (ready.get("finite") or [None] * len(groups[w]))[i]
                    before = results[name].finite
                    results[name].finite = ok if before is None else before and ok is not False
            for r in range(rounds):
                for w in list(workers):
                    group = groups[w]
                    turn = [*range(r % len(group), len(group)), *range(r % len(group))]
                    for i in (i for i in turn if results[group[i]].error is None):
                        time.sleep(settle)
                        try:
                            workers[w].send(f"go {i}")
                            answer = workers[w].answer(timeout)
                            if "failed" in answer:
                                fail(group[i], str(answer["failed"]))
                            else:
                                samples[(w, group[i])].append(float(answer["time"]))
                        except (_Fault, KeyError, TypeError, ValueError) as e:
                            died(w, str(e) if isinstance(e, _Fault) else f"bad answer: {e!r}")
                            break
            for worker in workers.values():
                worker.stop(grace=min(timeout, 10.0))
            workers.clear()
        finally:  # an interrupt or an error of ours: no worker outlives the call
            for worker in workers.values():
                worker.kill()
    for name, result in results.items():
        medians = [statistics.median(samples[(w, name)]) for w, group in enumerate(groups)
                   if name in group and samples[(w, name)]]
        if result.error is None and medians:
            result.seconds, result.worst = statistics.mean(medians), max(medians)
    return results, lost


def time_in_processes(builders: dict, rounds: int, calls: int, timeout: float | None = None,
                      settle: float = 0.2, processes: int = 1):
    """Median seconds per call for each `name -> (build, args)`, timed as `time_variants` does,
    each variant in `processes` processes of its own (the median of their medians: on a 2-core
    VM one process ran IREE's parallel executor 1.55x slower than the next for its whole life).
    Returns (medians, errors): a variant failed in any of its processes gets None and the
    error text."""
    copies = {(name, p): builders[name] for name in builders for p in range(processes)}
    results = time_variants({f"{n} #{p}": b for (n, p), b in copies.items()}, rounds, calls,
                            timeout, settle)
    medians, errors = {}, {}
    for name in builders:
        found = [results[f"{name} #{p}"] for p in range(processes)]
        failed = [r.error for r in found if r.error is not None]
        if failed:
            errors[name] = failed[0]
        medians[name] = None if failed else statistics.median(r.seconds for r in found)
    return medians, errors
