"""Device arrays read back to the host on every driver, and host arrays lent to a CPU device.
Standalone (numpy and iree.runtime only, no sft import): tools/gpu_check_run and the split's
helper process (`part_worker.py`) load this file by path.

Memory the host can map (the CPU's) is read through the mapping; a GPU's goes through a staging
buffer the device allocates: iree.runtime 3.13's `to_host` imports a numpy allocation instead
where the allocator says it can, and Vulkan then refuses the pointer (lavapipe: it must be
4096-byte aligned)."""

from __future__ import annotations

import numpy as np


_RAW_DTYPES: dict = {}  # IREE's element type -> the numpy dtype of its bits
_MAPPABLE: list = []  # [HOST_VISIBLE, MAPPING_SCOPED] as ints, read once


def to_host(value):
    """A device array's values as a numpy array (anything else as it is)."""
    if not hasattr(value, "to_host"):
        return value
    host = view_to_host(value._buffer_view, value._device)
    wanted = value._override_dtype
    return host if wanted is None or wanted == host.dtype else host.astype(wanted)


def borrowed_view(array: np.ndarray, device):
    """A C-contiguous host array as a buffer view over its own memory, uncopied (a CPU
    driver's device: the host's memory is its memory). IREE may write into an argument's
    buffer and return it as a result: only for memory the caller rewrites before each call."""
    import iree.runtime as rt
    from iree.runtime.array_interop import map_dtype_to_element_type

    buffer = device.allocator.import_host_allocation(
        array, int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE), int(rt.BufferUsage.DEFAULT))
    return rt.HalBufferView(buffer, array.shape, map_dtype_to_element_type(array.dtype))


def view_to_host(view, device) -> np.ndarray:
    """A buffer view's values as a numpy array of its element type: read through the mapping
    where the host can map it, else copied by `device` through a staging buffer."""
    if not _MAPPABLE:
        import iree.runtime as rt

        _MAPPABLE[:] = [int(rt.MemoryType.HOST_VISIBLE), int(rt.BufferUsage.MAPPING_SCOPED)]
    buffer = view.get_buffer()
    visible, scoped = _MAPPABLE
    raw = _RAW_DTYPES.get(view.element_type)
    if raw is None:
        import iree.runtime as rt

        raw = _RAW_DTYPES[view.element_type] = rt.HalElementType.map_to_dtype(view.element_type)
    if buffer.memory_type() & visible == visible and buffer.allowed_usage() & scoped == scoped:
        # The mapping read directly (the array keeps it alive): iree.runtime's own path checks
        # and converts the same things at 3x the cost, ~4 us of a one-op program's call.
        return view.map().asarray(view.shape, raw)
    return _staged_copy(view, device, raw)


def _staged_copy(view, device, raw) -> np.ndarray:
    """The buffer view copied by the device into a host-visible buffer it allocated itself."""
    import iree.runtime as rt

    source = view.get_buffer()
    staging = device.allocator.allocate_buffer(
        memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
        allocation_size=source.byte_length())
    done = device.create_semaphore(0)
    device.queue_copy(source, staging, wait_semaphores=rt.HalFence.create_at(done, 0),
                      signal_semaphores=rt.HalFence.create_at(done, 1))
    rt.HalFence.create_at(done, 1).wait()
    return np.array(staging.map().asarray(view.shape, raw), copy=True)
