"""A helper process that runs parts of split calls: `python part_worker.py FD` (run by path).

`part_process.py` is its only client. Standalone (numpy and iree.runtime only, no sft import),
so that it starts in a fraction of a second and never imports the caller's `__main__`.

Why a process and not a thread: a helper thread of the caller's process is handed each part and
hands it back through the interpreter's lock, and each hand-over between two cores is a wake-up
through the kernel: 56-81 us a round trip on a 2-core Xeon VM. A process has its own lock: it
waits for work by watching shared memory, and a round trip costs under 1 us while it watches
(OpenMP's workers wait the same way). After `SFT_PART_SPIN_US` (2000) without work it sleeps
on its stdin, and the caller writes a byte to wake it.

Protocol. FD is a file the caller mapped too (`CONTROL` bytes of int64 words, then the job's
header, then the data arena). The caller writes the job's pickled header (its length at
LENGTH) and its data, then raises GO to the job's number; the worker sets STARTED to it, runs the job, writes its answer
and sets DONE. Jobs:

    ("load", key, offset, length, entry)    the module whose .vmfb is at the arena's `offset`
    ("call", key, args, result_offset)      call module `key`; each argument is
        ("data", offset, shape, dtype)          an array in the arena
        ("keep", slot, offset, shape, dtype)    the same, uploaded and kept under `slot`
        ("kept", slot)                          the array kept under `slot`
    ("drop", slots, keys)                   forget kept arrays and modules

Its answer (pickled at the header): ("ok", results), each result ("data", offset, shape, dtype)
in the arena from `result_offset` on, or ("value", number); or ("error", text). The end of
stdin (the caller is gone) ends it.
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
import select
import sys
import time
from pathlib import Path

import numpy as np

# The control words (int64): the job's number raised, taken and done; whether the worker sleeps;
# the arena's size; the job header's length and version (raised where it differs from the last
# job's: the worker parses it again), the answer's length and version (the same, the other way)
GO, STARTED, DONE, SLEEPING, SIZE, LENGTH, JOB_ID, ANSWER, ANSWER_ID = range(9)
# the control block's bytes, where the answer's header starts (the job's is before it), the
# arena's start
CONTROL, ANSWER_AT, HEADER = 4096, 32768, 65536
ALIGN = 64


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class Worker:
    def __init__(self, fd: int):
        import iree.runtime as rt

        self.rt, self.fd = rt, fd
        self._map(os.fstat(fd).st_size)
        device = rt.get_driver("local-sync").create_device_by_uri("local-sync", allocators=["caching"])
        self.config = rt.Config(device=device)
        self.modules: dict = {}  # key -> (context, function)
        self.kept: dict = {}  # slot -> buffer view
        host_copy = _host_copy()
        self.view_to_host, self.borrowed_view = host_copy.view_to_host, host_copy.borrowed_view
        self.spin_s = float(os.environ.get("SFT_PART_SPIN_US", "2000")) * 1e-6

    def _map(self, size: int) -> None:
        self.memory = mmap.mmap(self.fd, size)
        self.control = np.ndarray((CONTROL // 8,), np.int64, self.memory)
        self.size, self.arrays = size, {}

    def serve(self) -> None:
        parent, seen = os.getppid(), int(self.control[DONE])  # a job may wait already
        job_id = prepared = last = None
        while True:
            idle_since = time.perf_counter()
            while self.control[GO] == seen:  # watched, then slept on
                if time.perf_counter() - idle_since > self.spin_s:
                    if not self._sleep(seen) or os.getppid() != parent:
                        return
                    idle_since = time.perf_counter()
            seen = int(self.control[GO])
            self.control[STARTED] = seen
            if self.control[SIZE] != self.size:
                self._map(int(self.control[SIZE]))
                job_id = last = None
            if self.control[JOB_ID] != job_id:  # a job unlike the last: parsed and prepared
                job_id = int(self.control[JOB_ID])
                prepared = self._prepare(pickle.loads(self.memory[CONTROL:CONTROL + int(self.control[LENGTH])]))
            answer = self._run(prepared)
            if answer != last:  # the caller reads it again only where it changed
                header = pickle.dumps(answer)
                if len(header) > HEADER - ANSWER_AT:
                    header = pickle.dumps(("error", f"the answer's header is {len(header)} bytes"))
                self.memory[ANSWER_AT:ANSWER_AT + len(header)] = header
                self.control[ANSWER] = len(header)
                self.control[ANSWER_ID] += 1
                last = answer
            self.control[DONE] = seen

    def _sleep(self, seen: int) -> bool:
        """Blocks until the caller writes a byte; False where stdin ended."""
        self.control[SLEEPING] = 1
        try:
            while self.control[GO] == seen:
                ready, _, _ = select.select([0], [], [], 1.0)
                if ready:
                    if not os.read(0, 4096):
                        return False
                elif os.getppid() == 1:  # orphaned
                    return False
            return True
        finally:
            self.control[SLEEPING] = 0

    def _array(self, offset, shape, dtype) -> np.ndarray:
        """The arena's array at `offset` (made once per mapping: the calls repeat)."""
        key = (offset, tuple(shape), dtype)
        found = self.arrays.get(key)
        if found is None:
            dtype = np.dtype(dtype)
            found = self.arrays[key] = (np.ndarray(shape, dtype, self.memory, offset)
                                        if math.prod(shape) else np.zeros(shape, dtype))
        return found

    def _upload(self, array: np.ndarray):
        from iree.runtime.array_interop import map_dtype_to_element_type

        device = self.config.device
        return device.allocator.allocate_buffer_copy(
            int(self.rt.MemoryType.DEVICE_LOCAL), int(self.rt.BufferUsage.DEFAULT), device, array,
            map_dtype_to_element_type(array.dtype))

    def _borrowed(self, array: np.ndarray):
        """The arena's array as a buffer view over the arena itself, made once for a prepared
        job: the caller writes each call's values there before it says go. Results are copied
        out of IREE's own buffers."""
        if not array.nbytes or not array.flags.c_contiguous:
            return self._upload(array)
        return self.borrowed_view(array, self.config.device)

    def _prepare(self, job):
        """The job as `_run` takes it: a call's module, and each argument a kept buffer view
        or a view over the arena (`_borrowed`); anything else done now (its answer kept)."""
        try:
            if job[0] == "load":
                _, key, offset, length, entry = job
                context = self.rt.SystemContext(config=self.config)
                module = self.rt.VmModule.copy_buffer(context.instance, self.memory[offset:offset + length])
                context.add_vm_module(module)
                self.modules[key] = (context, context.modules[module.name][entry].vm_function)
            elif job[0] == "drop":
                for slot in job[1]:
                    self.kept.pop(slot, None)
                for key in job[2]:
                    self.modules.pop(key, None)
            else:
                _, key, args, offset = job
                inputs = []
                for arg in args:
                    if arg[0] == "kept":
                        inputs.append(self.kept[arg[1]])
                        continue
                    array = self._array(*arg[-3:])
                    if arg[0] == "keep":  # uploaded now, once
                        self.kept[arg[1]] = self._upload(array)
                        inputs.append(self.kept[arg[1]])
                    else:
                        inputs.append(self._borrowed(array))
                context, function = self.modules[key]
                return (context.vm_context, function, inputs, offset)
            return ("ok", [])
        except Exception as err:
            return ("error", _line(err))

    def _run(self, prepared):
        """The prepared call made, its answer; or the answer `_prepare` gave."""
        if len(prepared) == 2:
            return prepared
        context, function, inputs, offset = prepared
        try:
            args = self.rt.VmVariantList(len(inputs))
            for view in inputs:
                args.push_ref(view)
            results = self.rt.VmVariantList(1)
            context.invoke(function, args, results)
            return ("ok", self._results(results, offset))
        except Exception as err:  # the caller raises it
            return ("error", _line(err))

    def _results(self, results, offset: int) -> list:
        rt, out = self.rt, []
        for i in range(len(results)):
            value = results.get_variant(i)
            if not isinstance(value, rt.VmRef):
                out.append(("value", value))
                continue
            host = self.view_to_host(value.deref(rt.HalBufferView, True), self.config.device)
            if offset + host.nbytes > self.size:
                raise MemoryError(f"result {i} ({host.nbytes} bytes) past the arena's end")
            np.copyto(self._array(offset, host.shape, host.dtype), host)
            out.append(("data", offset, host.shape, host.dtype))
            offset = aligned(offset + host.nbytes)
        return out


def _host_copy():
    """sft's read-back (host_copy.py beside this file, numpy and iree.runtime only), loaded by
    path: this process imports no sft."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sft_host_copy", Path(__file__).with_name("host_copy.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


if __name__ == "__main__":
    Worker(int(sys.argv[1])).serve()
