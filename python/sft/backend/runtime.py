"""Running compiled modules in-process with iree.runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import SftError
from .host_copy import borrowed_view, to_host, view_to_host  # noqa: F401  (to_host re-exported: the runtime's read-back)
from .iree import Artifact
from .process import run_group

GPU_DRIVERS = ("cuda", "hip", "vulkan")
# The parallel executor's worker count in this process and the timing workers it starts (by
# default one per core): a data-parallel rank sharing the machine with other ranks sets it to
# its share of the cores, or the ranks' threads would fight over them.
WORKERS_ENV = "SFT_TASK_WORKERS"

_CONFIGS: dict[str, object] = {}
# IREE's allocators for the CPU drivers: "caching" keeps freed blocks for the next call's
# buffers of the same sizes, where the default allocator returns them to the system. A training
# step's results and transients are fresh buffers every call: on a 2-core Zen 4 VM the time
# between dispatches fell 4x on local-sync (mlp_b32 step, 144 -> 36 us) and by 0.4-0.6 on
# local-task (800 -> 350 us, the JAX MLP step), by IREE's profile of each call.
HOST_ALLOCATORS = ("caching",)
_ELEMENT_TYPES: dict = {}  # numpy dtype -> IREE's element type


def _element_type(dtype):
    found = _ELEMENT_TYPES.get(dtype)
    if found is None:
        from iree.runtime.array_interop import map_dtype_to_element_type

        found = _ELEMENT_TYPES[dtype] = map_dtype_to_element_type(dtype)
        if found is None:
            raise ValueError(f"IREE has no element type for {dtype}")
    return found


# Calls on IREE's parallel executor are made from a thread of their own at the lowest priority.
# The thread that invokes a module waits inside IREE for its call to finish, and wakes while it
# runs (its semaphores advance); at the normal priority each wake took a core from the executor's
# workers: on a 2-core Zen 4 VM, IREE's default compile of torch's MLP step at batch 128 took
# 3.8 ms a call from the caller's thread, 3.5 ms from another thread, 2.6-2.9 ms from another
# thread at nice 19 (5.1 ms on local-sync; the CNN step 3.8, 2.8, 2.5 against 3.6), interleaved
# medians, a process per variant. Linux only: there a thread's nice value is its own.
# SFT_LOW_PRIORITY_INVOKER=0 calls from the caller's thread, as before (to measure the difference).
LOW_PRIORITY_INVOKER = (sys.platform.startswith("linux")
                        and os.environ.get("SFT_LOW_PRIORITY_INVOKER", "1") != "0")
# The hand-over itself costs two cross-core wake-ups, 46 us a round trip on the same VM (an
# empty function through the invoker): more than a short call loses to its waiter. A module's
# calls wait through the invoker where the fastest of its first `INVOKER_AFTER` calls, made
# from the caller's thread, took at least `INVOKER_FROM_S`; the choice then stays (calls that
# alternate between the two threads took 130-600 us where either thread alone took 26-70, a
# one-op program). Measured there on an MLP 256-1024-1024-256 on local-task, interleaved
# medians, direct against through the invoker: batch 4 206 / 249 us, batch 16 433 / 446,
# batch 64 1347 / 1302, batch 256 5395-6064 / 4744-5291.
INVOKER_FROM_S, INVOKER_AFTER = 400e-6, 5
_invoker: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, the thread)
_in_invoker = threading.local()


def _lowest_priority() -> None:
    _in_invoker.active = True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)  # this thread's, on Linux
    except OSError:
        pass  # not allowed here: the thread still waits apart from the caller


def _invoke(fn, arrays):
    """`fn(*arrays)` from the low-priority invoker thread (one per process, made again after a
    fork), the caller waiting on it; called from that thread itself, directly."""
    global _invoker
    if getattr(_in_invoker, "active", False):
        return fn(*arrays)
    if _invoker is None or _invoker[0] != os.getpid():
        _invoker = (os.getpid(), ThreadPoolExecutor(1, "sft-invoke", initializer=_lowest_priority))
    return _invoker[1].submit(fn, *arrays).result()


def device_flags(driver: str) -> list[str]:
    """The flags that give IREE's tools the device this process runs `driver` on."""
    flags = [f"--device={driver}"]
    if driver.startswith("local-"):
        flags += [f"--device_allocator={a}" for a in HOST_ALLOCATORS]
    return flags


def _config(driver: str):
    """One runtime config (device and thread pool) per driver and process, shared by every
    loaded module, so that modules timed side by side do not compete with each other's workers."""
    import iree.runtime as rt

    if driver not in _CONFIGS:
        workers = os.environ.get(WORKERS_ENV)
        if workers and driver == "local-task":  # read when the executor starts: before its config
            rt.flags.parse_flags(f"--task_topology_max_group_count={int(workers)}")
        try:
            if driver.startswith("local-"):
                device = rt.get_driver(driver).create_device_by_uri(driver, allocators=list(HOST_ALLOCATORS))
                _CONFIGS[driver] = rt.Config(device=device)
            else:
                _CONFIGS[driver] = rt.Config(driver)
        except (RuntimeError, ValueError) as err:  # no such device here, or no driver library
            raise SftError(f"cannot run on IREE's '{driver}' driver here: {str(err).strip()} "
                           "(the module is compiled: `compiled.save(path)` writes it)") from None
    return _CONFIGS[driver]


def check_driver(driver: str) -> None:
    """An SftError unless IREE's `driver` has a device to run on here."""
    _config(driver)


class Loaded:
    """A compiled module loaded in the IREE runtime: call it with numpy arrays."""

    def __init__(self, artifact: Artifact, entry: str = "main", driver: str = ""):
        import iree.runtime as rt

        self.artifact = artifact
        self.driver = driver or artifact.target.driver
        self._ctx = rt.SystemContext(config=_config(self.driver))
        module = rt.VmModule.copy_buffer(self._ctx.instance, artifact.vmfb)
        self._ctx.add_vm_module(module)
        # Called through the VM context itself, not iree.runtime's FunctionInvoker: its Python
        # argument packing and result mapping cost ~4 us of a 7 us call (a 2-core Zen 4 VM).
        self._fn = self._ctx.modules[module.name][entry].vm_function  # "module" unless named
        self._device = self._ctx.config.device
        self._vm_invoke = self._ctx.vm_context.invoke
        self._allocate_copy = self._device.allocator.allocate_buffer_copy
        self._list, self._ref, self._view = rt.VmVariantList, rt.VmRef, rt.HalBufferView
        self._device_array = rt.DeviceArray
        self._memory_type, self._usage = int(rt.MemoryType.DEVICE_LOCAL), int(rt.BufferUsage.DEFAULT)
        self._borrows = self.driver in ("local-sync", "local-task")  # the host's memory is the device's
        # where this module's calls wait: None until its first calls say (`INVOKER_FROM_S`)
        self._call_times: list[float] = []
        self._through_invoker = None if LOW_PRIORITY_INVOKER and self.driver == "local-task" else False

    def __call__(self, *arrays) -> list[np.ndarray]:
        """Results on the host (numpy arrays; a scalar result, an i64 say, as a Python number)."""
        return [to_host(o) for o in self.call_on_device(*arrays)]

    def call_on_device(self, *arrays, host: bool = False) -> list:
        """Results as they are: device arrays stay on the device (to be passed to a later call
        without a copy through the host); with `host`, every result read back."""
        args, results = self.arguments(arrays), self._list(1)
        if self._through_invoker:
            self.guarded(_invoke, self._vm_invoke, (self._fn, args, results))
        else:
            start = time.perf_counter()
            self.invoke(args, results)
            if self._through_invoker is None:  # (>=: calls from several threads at once)
                self._call_times.append(time.perf_counter() - start)
                if len(self._call_times) >= INVOKER_AFTER:
                    self._through_invoker = min(self._call_times) >= INVOKER_FROM_S
        return self.outputs(results, host)

    def arguments(self, arrays):
        """A call's argument list: device arrays as they are, host values copied in."""
        args = self._list(len(arrays))
        for array in arrays:
            view = getattr(array, "_buffer_view", None)  # a device array: passed as it is
            args.push_ref(view if view is not None else self.copied_in(array))
        return args

    def borrowed(self, array: np.ndarray):
        """A C-contiguous host array as a buffer view over its own memory (the CPU drivers':
        the host's memory is the device's), uncopied: only for memory sft itself rewrites
        before each call (a split's shared memory). IREE may write into an argument's buffer
        (a sort sorts its input's copy in place: borrowed, it sorted the caller's tensor) and
        may return it as a result (`unshared`)."""
        if not self._borrows or not array.flags.c_contiguous or array.ndim == 0:
            return self.copied_in(array)
        return self.guarded(borrowed_view, array, self._device)

    def copied_in(self, value):
        """A host value (an array, a numpy scalar) copied to the device, as a buffer view."""
        array = np.asarray(value)
        return self.guarded(self._allocate_copy, self._memory_type, self._usage, self._device,
                            array, _element_type(array.dtype))

    def invoke(self, args, results) -> None:
        """The module's entry on `args` (from `arguments`), on this thread, into `results`."""
        self.guarded(self._vm_invoke, self._fn, args, results)

    def guarded(self, fn, *args):
        """`fn(*args)`, what iree.runtime raises turned into one SftError line."""
        try:
            return fn(*args)
        except (IndexError, ValueError, RuntimeError) as err:  # what iree.runtime raises
            first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
            raise SftError(f"the compiled module failed at run time on the {self.driver} driver "
                           f"(IREE's runtime): {first[:400]}") from None

    def outputs(self, results, host: bool = False) -> list:
        """A call's results: buffers as iree.runtime's DeviceArray (numpy arrays read back
        where `host`), scalars as numbers."""
        outs = []
        for i in range(len(results)):
            value = results.get_variant(i)
            view = value.deref(self._view, True) if isinstance(value, self._ref) else None
            # a buffer as iree.runtime's DeviceArray, a scalar (an i64 say) as the number it is
            if view is None:
                outs.append(value)
            elif host:  # read straight from the view: no DeviceArray made to be read back
                outs.append(view_to_host(view, self._device))
            else:
                outs.append(self._device_array(self._device, view, implicit_host_transfer=True))
        return outs

    def allocate(self, shape, dtype):
        """A device buffer of `shape` and `dtype` (zeros), for the module to write a result
        into; IREE's integers carry no sign, so an unsigned dtype is allocated signed."""
        array = np.zeros(shape, dtype)
        if array.dtype.kind == "u":
            array = array.view(array.dtype.str.replace("u", "i"))
        return self.upload(array)

    def upload(self, array: np.ndarray):
        """`array` copied to the device once, to be passed to many calls."""
        import iree.runtime as rt

        return rt.asdevicearray(self._ctx.config.device, np.ascontiguousarray(array)
                                if array.ndim else array)


def unshared(outs: list, arrays) -> list:
    """`outs` with any host array that shares memory with a host array of `arrays` copied: a
    result IREE wrote into a borrowed argument's buffer, or returned unchanged from it
    (`Loaded.borrowed`)."""
    lent = [a for a in arrays if type(a) is np.ndarray]
    if not lent:
        return outs
    return [o.copy() if type(o) is np.ndarray and any(np.may_share_memory(o, a) for a in lent) else o
            for o in outs]


def load(artifact: Artifact, entry: str = "main", driver: str = "") -> Loaded:
    """Load a module on `driver` (the target's own when empty)."""
    return Loaded(artifact, entry, driver)


# Run in a child process: a GPU driver can hang or crash while it loads (a broken ICD, a driver
# library that does not match the kernel module); the doctor reports it and goes on.
_QUERY = """
import json, iree.runtime as rt
found = []
for name in %r:
    try:
        devices = rt.get_driver(name).query_available_devices()
    except Exception:  # the driver's library (libcuda, libamdhip64, libvulkan) is not there
        continue
    found += [{"driver": name, "id": d.get("device_id"), "name": d.get("name") or "",
               "path": d.get("path") or ""} for d in devices]
print(json.dumps(found))
"""


def gpu_devices(drivers=GPU_DRIVERS, timeout: float = 60.0) -> list[dict]:
    """The GPUs IREE's runtime reports ({driver, id, name, path}); none where a driver's library
    is missing, the query fails or it does not answer within `timeout` seconds."""
    try:
        proc = run_group([sys.executable, "-c", _QUERY % (drivers,)], timeout)
        return json.loads(proc.stdout) if proc.returncode == 0 else []
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return []


def silence_exit_leak_report() -> None:
    """No nanobind leak report at interpreter exit: runtime objects that a cache holds until
    then (Dynamo's compiled graphs) are freed after the bindings' own check runs."""
    from iree.runtime import _binding

    _binding.disable_leak_checker()
