"""A split in parts, run side by side: one core a part, each on IREE's local-sync.

`passes/split_batch.py` proves a program's rows independent (or its weights' hidden units) and
compiles it for one part; `PartsLoaded` runs it: the cut arguments cut along their dims (the
model's state once, each part's share kept), the first part called
on the caller's thread and each other in a helper process (`part_process.py`) that keeps the
model's state, and each result joined along its batch dim. A helper process watches shared
memory for its part: on the 2-core Xeon VM a round trip costs about 5 us, where a helper
thread costs two cross-core wake-ups through the interpreter's lock, 56-81 us (26 + 28 us on
a 2-core Zen 4 VM, against a 256-1024-256 MLP at batch 32 that took 207 us a half). There,
side by side, attention (2x32x128) took 168-204 us a call in processes and 274-283 in
threads, the encoder layer 295-308 and 389-420, one thread the whole 167-171 and 322-334.
IREE's parallel executor (local-task) meets once per dispatch and took that MLP 521 us where
one thread took 423 (Zen 4).

A program that sums over its batch (a training step) meets twice more: its parts' partial
sums go to join functions, called side by side as the parts were, each updating its share of
the state (`passes/split_join.py`); the caller keeps that state, so these parts run on
threads. A 256-1024-256 MLP's MSE + AdamW step at batch 32: each half 471 us alone and 539
side by side, each join 170 alone and 241 side by side, 1.05-1.12 ms the call, where IREE's
parallel executor took the whole step 1.04-1.10 ms: no gain there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import threading
import time
import weakref

import numpy as np

from ..errors import SftError
from .host_copy import to_host
from .iree import Artifact
from .part_process import part_processes
from .runtime import Loaded, unshared

PARTS_DRIVER = "local-sync"  # one thread a part: the parts themselves are the parallelism
# SFT_PART_PROCESSES=0 runs every part on a thread of this process (to measure the difference)
USE_PROCESSES = os.environ.get("SFT_PART_PROCESSES", "1") != "0"


def in_processes(layout) -> bool:
    """Whether a split of `layout` runs its parts but the first in helper processes
    (`part_process.py`): where it updates no state (the caller keeps a training step's, which
    the parts would read anew each call)."""
    return USE_PROCESSES and not layout.updates


class _Helper:
    """A thread that makes one part's calls, handed each by the caller and waited on."""

    def __init__(self):
        self._go, self._done = threading.Event(), threading.Event()
        self._job = self._error = None
        threading.Thread(target=self._run, name="sft-part", daemon=True).start()

    def _run(self):
        while True:
            self._go.wait()
            self._go.clear()
            try:
                self._job[0](*self._job[1:])
            except BaseException as err:  # re-raised on the caller's thread
                self._error = err
            self._done.set()

    def start(self, fn, *args) -> None:
        self._job, self._error = (fn, *args), None
        self._go.set()

    def wait(self) -> None:
        self._done.wait()
        self._done.clear()
        if self._error is not None:
            raise self._error


_helpers: tuple[int, list[_Helper]] = (0, [])  # (the process they belong to, the threads)


def _helper_threads(count: int) -> list[_Helper]:
    """`count` helper threads of this process (made again after a fork), shared by every
    module: calls wait for their helpers, so one call at a time uses them (`_lock`)."""
    global _helpers
    if _helpers[0] != os.getpid():
        _helpers = (os.getpid(), [])
    while len(_helpers[1]) < count:
        _helpers[1].append(_Helper())
    return _helpers[1][:count]


_lock = threading.Lock()


class _Copied:
    """A host value copied to the device once a call (`Loaded.arguments` passes its view)."""

    __slots__ = ("_buffer_view",)

    def __init__(self, view):
        self._buffer_view = view


def _side_by_side(calls: list) -> None:
    """Each (loaded module, arguments, results) invoked at once: the first on this thread, each
    other on a helper thread; every one waited for, the first failure raised."""
    if len(calls) == 1:  # (no helper: nothing to hold them for)
        calls[0][0].invoke(*calls[0][1:])
        return
    with _lock:
        helpers = _helper_threads(len(calls) - 1)
        for helper, (m, args, results) in zip(helpers, calls[1:]):  # theirs handed out first
            helper.start(m.invoke, args, results)
        errors = []
        for wait in [lambda: calls[0][0].invoke(*calls[0][1:]), *(h.wait for h in helpers)]:
            try:  # every helper waited for, whatever failed
                wait()
            except BaseException as err:
                errors.append(err)
        if errors:
            raise errors[0]


class PartsLoaded:
    """A module compiled for one of `parts` parts, loaded once per part on one device, called
    with the whole arguments as `layout` (`passes.split_batch.SplitLayout`) says: the arguments
    at `layout.cuts` cut along their dims (the batch's rows, or a layer's columns and the next
    one's rows: the model's state is cut once and each part's share kept while that state
    stays), the others passed to every part; the parts' results that carry the batch joined
    along their dims, and where the parts sum over their batch, the join functions called on
    their partial sums for the other results (left on the device: a training step's new
    state)."""

    def __init__(self, artifact: Artifact, entry: str, parts: int, layout,
                 held: dict[int, int] | None = None):
        self.parts, self.layout, self.cuts = parts, layout, dict(layout.cuts)
        # arguments passed held (`passes.hold_transposed.holding`: position -> panel width)
        self._held = dict(held or {})
        if set(self._held) & set(layout.join_args):
            raise SftError("a split whose joins read its arguments holds transposed none of those")
        # the whole's results the parts return joined, in order (theirs first, then their sums)
        self._carried = [j for j, dim in enumerate(layout.joins) if dim is not None]
        self._joins = [Loaded(artifact, name, PARTS_DRIVER) for name in layout.join_entries]
        # every part but the first in a helper process where the parts write no state
        self._artifact, self._entry = artifact, entry
        self._helpers, self._keys = [], []
        if in_processes(layout):
            with _lock:  # the helpers serve one call at a time, whoever's
                self._start_helpers()
        self._loaded = [Loaded(artifact, entry, PARTS_DRIVER)
                        for _ in range(1 if self._helpers else parts)]
        self._shares: dict[int, tuple] = {}  # argument -> (the state array, each part's share)
        self._lent: dict[int, tuple] = {}  # id -> (a helper's result, its view: `_lent_view`)
        self.driver = PARTS_DRIVER

    def upload(self, array: np.ndarray):
        return self._loaded[0].upload(array)

    def allocate(self, shape, dtype):
        return self._loaded[0].allocate(shape, dtype)

    def call_on_device(self, *arrays, host: bool = False) -> list:
        """The results: those joined from the parts on the host, the joins' on the device
        (read back too where `host`)."""
        shares = {i: self._shares_of(arrays, i, dim) for i, dim in self.cuts.items()}
        if self._helpers:
            joined = self._call_with_processes(arrays, shares, host)
        else:  # every other host value copied in once, for every part and join function
            arrays = [a if i in shares or hasattr(a, "_buffer_view")
                      else _Copied(self._loaded[0].copied_in(a)) for i, a in enumerate(arrays)]
            calls = [(m, m.arguments(self._part(arrays, shares, k)), m._list(1))
                     for k, m in enumerate(self._loaded)]
            _side_by_side(calls)
            joined = self._joined(arrays, [m.outputs(results) for m, _, results in calls], host)
        return [to_host(o) for o in joined] if host else joined

    def _shares_of(self, arrays: tuple, i: int, dim: int) -> list:
        """Each part's share of argument `i`, cut along `dim`: a host value's cut at each call,
        the model's state (a device value) cut once while it is the same object, the first
        part's share then on the device, the others' too where they run on threads."""
        array = arrays[i] if i < len(arrays) else None
        known = self._shares.get(i)
        if known is not None and known[0] is array:
            return known[1]
        if type(array) is np.ndarray and dim == 0 and array.ndim and not len(array) % self.parts \
                and array.flags.c_contiguous:  # a batch's rows: views, no copy
            size = len(array) // self.parts
            return [array[k * size:(k + 1) * size] for k in range(self.parts)]
        shape = tuple(getattr(array, "shape", None) or np.shape(array))
        if i in self._held and not self._held[i]:  # held transposed: a transposed share of it
            dim = len(shape) - 1 - dim                 # is this dim's
        # held packed ([N/n0, K, n0, 1] of the user's [N, K]): its dims 0 and 1 are the user's,
        # and a cut into whole panels is each part's weight packed
        if len(shape) <= dim or shape[dim] % self.parts:
            raise SftError(f"argument {i} does not divide into {self.parts} parts along dim {dim}")
        whole, size = to_host(array), shape[dim] // self.parts
        before = (slice(None),) * dim
        # (a cut along dim 0 of a C-contiguous array is one already: no copy)
        shares = [np.ascontiguousarray(whole[(*before, slice(k * size, (k + 1) * size))])
                  for k in range(self.parts)]
        if hasattr(array, "_buffer_view"):
            local = len(self._loaded)  # the shares of the parts this process runs
            shares = [self.upload(a) if k < local else a for k, a in enumerate(shares)]
            self._shares[i] = (array, shares)
        return shares

    def _part(self, arrays, shares: dict, k: int) -> list:
        return [shares[i][k] if i in shares else a for i, a in enumerate(arrays)]

    def _joined(self, arrays, outs: list, host: bool) -> list:
        """The whole's results from the parts' `outs`: those the parts carry joined along their
        dims; the others the join functions' where the parts return sums (each sum's partials,
        every part's in turn, after the arguments they read; read back where `host`), else the
        first part's."""
        carried = self._carried
        if self._joins:
            partials = [out[len(carried) + i] for i in range(self.layout.sums) for out in outs]
            # a helper's partials lie in its shared memory, which sft rewrites each call: lent
            # to the joins uncopied, and their results read back apart from it
            lent = [p for p in partials if type(p) is np.ndarray]
            given = [arrays[i] for i in self.layout.join_args] + [
                self._lent_view(p) if type(p) is np.ndarray else p for p in partials]
            calls = [(m, m.arguments(given), m._list(1)) for m in self._joins]
            _side_by_side(calls)
            rest = [None] * sum(map(len, self.layout.join_groups))
            for (m, _, results), group in zip(calls, self.layout.join_groups):
                outputs = m.outputs(results, host or bool(lent))
                for i, out in zip(group, unshared(outputs, lent) if lent else outputs):
                    rest[i] = out
            rest = iter(rest)
        else:  # the same in every part: the first part's
            rest = iter(to_host(o) for o in outs[0][len(carried):])
        parts = iter(np.concatenate([to_host(out[k]) for out in outs], axis=self.layout.joins[j])
                     for k, j in enumerate(carried))
        return [next(rest) if dim is None else next(parts) for dim in self.layout.joins]

    def _lent_view(self, array: np.ndarray) -> _Copied:
        """A helper's result in its shared memory as a buffer view over that memory, made once
        per array: the helper writes each call's values to the same place and hands back the
        same arrays while its results keep their places (`PartProcess.wait`)."""
        known = self._lent.get(id(array))
        if known is None or known[0] is not array:
            if len(self._lent) >= 4 * self.layout.sums:  # (old arrays: the arena was remapped)
                self._lent.clear()
            known = self._lent[id(array)] = (array, _Copied(self._joins[0].borrowed(array)))
        return known[1]

    def _start_helpers(self) -> None:
        """This module loaded in the helper processes (again where one died); `_lock` held."""
        self._helpers = part_processes(self.parts - 1)
        self._keys = [helper.load(self._artifact.vmfb, self._entry) for helper in self._helpers]
        for helper, key in zip(self._helpers, self._keys):
            weakref.finalize(self, helper.forget, key)

    def _call_with_processes(self, arrays: tuple, shares: dict, host: bool) -> list:
        """The first part on this thread, each other in its helper process: the values on the
        device (the state, whole or each part's share of it) kept there from call to call."""
        kept = {i for i, a in enumerate(arrays) if hasattr(a, "_buffer_view")}
        first = self._loaded[0]
        with _lock:
            if not all(helper.alive for helper in self._helpers):  # a call failed with it
                self._start_helpers()
            started, results = [], first._list(1)
            try:
                for k, (helper, key) in enumerate(zip(self._helpers, self._keys), 1):
                    helper.start(key, self._part(arrays, shares, k), kept)
                    started.append(helper)
                first.invoke(first.arguments(self._part(arrays, shares, 0)), results)
            finally:  # every helper begun waited for, whatever failed
                theirs = [helper.wait() for helper in started]
        # (the helpers' results are on the host: the first part's read back too, but for sums,
        # which go to a join on the device)
        return self._joined(arrays, [first.outputs(results, host and not self._joins), *theirs], host)


# What a split call costs beyond its slowest part, besides the hand-over, a part: cutting the
# batch, each part's argument list and read-back, the join; through a helper process also the
# part's arguments and results through shared memory, and the interpreter's work after a
# kernel that ran with its caches taken. Threads: about 15 us a part on the 2-core Zen 4 VM (a
# 256-1024-256 MLP at batch 32). Processes: 27-50 us on the 2-core Xeon VM (the split call's
# time beyond its first part alone, less the round trip: attention 27, the encoder layer 31,
# the MLP 50; the MLP's part streams its 2 MB of weights through the core's L2).
PART_COST_S = {"threads": 15e-6, "processes": 30e-6}
# A join function's call after the parts (a weight split's partial sums added, the bias after):
# its arguments' list, the call and read-back. Measured in the 256-1024-256 MLP's split call on
# the Xeon VM: 28-31 us at batch 32, 44 at batch 128 (partial sums of 32 and 128 KB).
JOIN_SECONDS = 25e-6


@functools.cache
def handoff_seconds() -> float:
    """A helper thread on another core woken and waited for, doing nothing: the median of 64
    round trips in this process (measured once), the caller and the helper held on two
    different cores meanwhile (Linux). Left free, the scheduler may keep both threads on one
    core (the Xeon VM, after the process started others: the search's iree-compile), where a
    round trip reads 10 us but the parts would run one after the other; across cores it reads
    56-81 there, what a split call was measured to pay beyond its parts (60-100 us), and about
    50 on the 2-core Zen 4 VM."""
    helper, times = _helper_threads(1)[0], []
    with _lock, _on_two_cores(helper):
        for _ in range(64):
            start = time.perf_counter()
            helper.start(lambda: None)
            helper.wait()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _on_two_cores(helper: _Helper):
    """This thread held on the core it runs on and `helper` on another, both freed after
    (where the OS has no affinity calls, or one core is allowed: left as they are)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else set()
    here = _cpu_now(allowed) if allowed else None
    there = min(allowed - {here}, default=None)
    if there is None:
        yield
        return
    os.sched_setaffinity(0, {here})
    helper.start(os.sched_setaffinity, 0, {there})
    helper.wait()
    try:
        yield
    finally:
        helper.start(os.sched_setaffinity, 0, allowed)
        helper.wait()
        os.sched_setaffinity(0, allowed)


def _cpu_now(allowed: set[int]) -> int:
    """The core this thread last ran on (Linux), else the first it may use."""
    try:
        with open("/proc/thread-self/stat") as stat:  # field 39, the processor
            cpu = int(stat.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        cpu = -1
    return cpu if cpu in allowed else min(allowed)


def split_overhead(parts: int, processes: bool) -> float:
    """Seconds a call split in `parts` costs beyond its slowest part, in helper processes
    (`in_processes`) or threads."""
    if processes:
        return process_round_trip() + PART_COST_S["processes"] * parts
    return handoff_seconds() + PART_COST_S["threads"] * parts


@functools.cache
def process_round_trip() -> float:
    """A helper process handed a job that does nothing and heard back from (measured once):
    about 5 us on the 2-core Xeon VM while it watches for work."""
    with _lock:
        return part_processes(1)[0].round_trip()
