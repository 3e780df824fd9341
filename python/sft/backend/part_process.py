"""Helper processes for split calls: each runs one part of every call it is handed.

A split call's parts run side by side, one core each (`parts.py`). Handed to a thread of the
caller's process, a part goes and comes back through the interpreter's lock, a wake-up through
the kernel each way: 56-81 us a round trip on a 2-core Xeon VM, a third of the MLP's part. A
helper process (`part_worker.py`) watches shared memory for its next part instead, as OpenMP's
workers do, and a round trip costs about 1 us while it watches (2 ms after its last part, then
it sleeps on a pipe and is woken through it). The price: the part's arguments and results cross
through shared memory, and the values a call passes unchanged from one call to the next (the
model's state) are kept there once, by identity, so this serves programs that never write
their state (inference); a split that updates state (a training step's join) runs on threads.
"""

from __future__ import annotations

import atexit
import itertools
import mmap
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import SftError
from .host_copy import to_host
from .part_worker import (ANSWER, ANSWER_AT, ANSWER_ID, CONTROL, DONE, GO, HEADER, JOB_ID, LENGTH, SIZE,
                          SLEEPING, STARTED, aligned)

WORKER = Path(__file__).with_name("part_worker.py")
# The caller watches for the part's end this long, then polls at `POLL_S`: a part longer than
# the caller's own costs that much more latency, and the caller's core is not held meanwhile.
WATCH_S, POLL_S = 0.002, 50e-6
_keys = itertools.count(1)


class PartProcess:
    """One helper process and the shared memory it runs parts from."""

    def __init__(self, size: int = 1 << 20):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self._fd, path = tempfile.mkstemp(prefix="sft-part-", dir=shm)
        os.unlink(path)
        self._resize(HEADER + size)
        # -I: the worker's folder not on its path (its neighbour iree.py would shadow IREE's),
        # nor the user's environment; it imports numpy and iree.runtime only
        self._process = subprocess.Popen([sys.executable, "-I", str(WORKER), str(self._fd)],
                                         stdin=subprocess.PIPE, pass_fds=(self._fd,))
        self._pid = os.getpid()
        self._job = 0
        self._kept: dict = {}  # (module key, argument) -> (the array kept, its slot)
        # module key -> its call as last begun, repeated while the arguments match (`_again_as`)
        self._repeats: dict[int, tuple] = {}
        self._slots = itertools.count(1)
        self._dropped: list[int] = []  # slots, and modules, the helper may forget
        self._unloaded: list[int] = []
        self._result_bytes: dict[int, int] = {}  # module key -> room its results took
        self._call = None  # the call begun last, made again where its results had no room
        self._job_sent, self._answer_id, self._answer = None, 0, None  # the last job and answer
        atexit.register(self.close)

    def _resize(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._memory = mmap.mmap(self._fd, size)
        self._control = np.ndarray((CONTROL // 8,), np.int64, self._memory)
        self._control[SIZE] = self.size = size
        self._job_sent, self._answer_id = None, -1  # the helper maps it again: everything sent again
        self._repeats = {}

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if os.getpid() == self._pid and self.alive:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()

    def load(self, vmfb: bytes, entry: str) -> int:
        """The module loaded in the helper: its key for `start`."""
        key = next(_keys)
        if HEADER + len(vmfb) > self.size:
            self._resize(aligned(HEADER + len(vmfb)))
        self._memory[HEADER:HEADER + len(vmfb)] = vmfb
        self._send(("load", key, HEADER, len(vmfb), entry))
        self.wait()
        return key

    def forget(self, key: int) -> None:
        """Module `key` and the arrays kept for it forgotten (at the next call)."""
        self._unloaded.append(key)
        self._repeats.pop(key, None)
        for known in [k for k in self._kept if k[0] == key]:
            self._dropped.append(self._kept.pop(known)[1])

    def start(self, key: int, arrays: list, kept: set[int]) -> None:
        """A call of module `key` on `arrays` begun in the helper (host arrays, or device
        arrays, read back once each where at an argument in `kept`: the same object the next
        time is not sent again)."""
        if not self._again_as(key, arrays):
            self._begin(key, arrays, kept)
        self._call = (key, arrays, kept)

    def _begin(self, key: int, arrays: list, kept: set[int]) -> None:
        """`start`'s job built, its arguments written to the shared memory, and sent."""
        args, data, offset = [], [], HEADER
        for i, array in enumerate(arrays):
            known = self._kept.get((key, i)) if i in kept else None
            if known is not None and known[0] is array:
                args.append(("kept", known[1]))
                continue
            host = np.asarray(to_host(array))
            if not host.flags.c_contiguous:  # (np.ascontiguousarray makes a 0-d array 1-d)
                host = host.copy(order="C")
            if i in kept:
                slot = next(self._slots)
                if known is not None:
                    self._dropped.append(known[1])
                self._kept[(key, i)] = (array, slot)
                args.append(("keep", slot, offset, host.shape, host.dtype))
            else:
                args.append(("data", offset, host.shape, host.dtype))
            data.append((offset, host))
            offset = aligned(offset + host.nbytes)
        if offset + self._results_need(key) > self.size:
            self._resize(aligned(2 * (offset + self._results_need(key))))
        places = [np.ndarray(host.shape, host.dtype, self._memory, at) for at, host in data]
        for place, (_, host) in zip(places, data):
            np.copyto(place, host)
        if self._dropped or self._unloaded:  # taken first: a finalizer may add more meanwhile
            dropped, self._dropped = self._dropped, []
            unloaded, self._unloaded = self._unloaded, []
            self._send(("drop", dropped, unloaded))
            self.wait()
        job = ("call", key, args, offset)
        self._send(job)
        # what the next call repeats where it passes the same kept arrays, and host arrays of
        # the same shapes and dtypes elsewhere (once the kept ones are in the helper)
        if all(arg[0] != "keep" for arg in args):
            sent = [i for i, arg in enumerate(args) if arg[0] == "data"]
            self._repeats[key] = (len(arrays), job, [(i, arrays[i]) for i in kept],
                                  list(zip(sent, places)))
        else:
            self._repeats.pop(key, None)

    def _again_as(self, key: int, arrays: list) -> bool:
        """Whether the call of module `key` begun last was begun again on `arrays`: where they
        match it, only their values are copied (building and comparing the job took most of a
        split call's hand-over, 8-13 us of it on a 2-core Xeon VM)."""
        repeat = self._repeats.get(key)
        if repeat is None or self._dropped or self._unloaded or len(arrays) != repeat[0]:
            return False
        _, job, kept, places = repeat
        if any(arrays[i] is not array for i, array in kept) or any(
                type(arrays[i]) is not np.ndarray or arrays[i].shape != place.shape
                or arrays[i].dtype != place.dtype for i, place in places):
            return False
        for i, place in places:
            np.copyto(place, arrays[i])
        self._send(job)
        return True

    def _results_need(self, key: int) -> int:
        return self._result_bytes.get(key, 1 << 16)

    def _send(self, job) -> None:
        self._call = None
        if job is not self._job_sent and job != self._job_sent:  # else the helper runs the job
            # it prepared last (unpickled)
            header = pickle.dumps(job)
            if len(header) > ANSWER_AT - CONTROL:
                raise SftError(f"a part's call has too many arguments ({len(header)} bytes of header)")
            self._memory[CONTROL:CONTROL + len(header)] = header
            self._control[LENGTH] = len(header)
            self._control[JOB_ID] += 1
            self._job_sent = job
        self._job += 1
        self._control[GO] = self._job
        if self._control[SLEEPING]:
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._process.stdin.fileno(), b"\1")
        except OSError:
            pass  # it is gone: `wait` says so

    def wait(self) -> list:
        """The results of the job begun last: numpy arrays in the shared memory (valid until
        the next call: copy what is kept) or numbers."""
        control, job, begun = self._control, self._job, time.perf_counter()
        checked = begun
        while control[DONE] != job:
            now = time.perf_counter()
            if now - checked > 1e-3:  # rarely: whether it died, or sleeps through its job
                checked = now
                if self._process.poll() is not None:
                    raise SftError(f"the split's helper process died (exit code "
                                   f"{self._process.returncode}) running its part")
                if control[STARTED] != job:
                    self._wake()
            if now - begun > WATCH_S:
                time.sleep(POLL_S)
        if control[ANSWER_ID] != self._answer_id:  # else the answer is the last one
            self._answer_id = int(control[ANSWER_ID])
            status, results = pickle.loads(self._memory[ANSWER_AT:ANSWER_AT + int(control[ANSWER])])
            self._answer = (status, results if status != "ok" else
                            [np.ndarray(r[2], r[3], self._memory, r[1]) if r[0] == "data" else r[1]
                             for r in results])
        status, results = self._answer
        if status != "ok":
            if results.startswith("MemoryError") and self._call is not None:
                return self._again()
            raise SftError(f"the compiled module failed at run time in the split's helper "
                           f"process (IREE's runtime, local-sync): {results[:400]}")
        return results

    def _again(self) -> list:
        """The last call made again with room for results twice the arena's size (a pure
        call: nothing it wrote is kept)."""
        key, arrays, kept = self._call
        self._result_bytes[key] = 2 * max(self.size, self._result_bytes.get(key, 0))
        self._repeats.pop(key, None)  # its job had the room that was too small
        self.start(key, arrays, kept)
        return self.wait()

    def round_trip(self) -> float:
        """Seconds a job that does nothing takes to go and come back (the median of 64)."""
        times = []
        for _ in range(64):
            start = time.perf_counter()
            self._send(("drop", [], []))
            self.wait()
            times.append(time.perf_counter() - start)
        return statistics.median(times)


_helpers: tuple[int, list[PartProcess]] = (0, [])  # (the process they belong to, the helpers)


def part_processes(count: int) -> list[PartProcess]:
    """`count` helper processes of this process (started again after a fork, and where one
    died), shared by every split module: one call at a time uses them (`parts._lock`)."""
    global _helpers
    if _helpers[0] != os.getpid():
        _helpers = (os.getpid(), [])
    _helpers[1][:] = [helper for helper in _helpers[1] if helper.alive]
    while len(_helpers[1]) < count:
        _helpers[1].append(PartProcess())
    return _helpers[1][:count]
