"""Device arrays read back to the host on every driver. Standalone (numpy and iree.runtime
only, no sft import): tools/gpu_check_run loads this file by path on the GPU machine.

Memory the host can map (the CPU's) is read through the mapping; a GPU's goes through a staging
buffer the device allocates: iree.runtime 3.13's `to_host` imports a numpy allocation instead
where the allocator says it can, and Vulkan then refuses the pointer (lavapipe: it must be
4096-byte aligned)."""

from __future__ import annotations

import numpy as np


def to_host(value):
    """A device array's values as a numpy array (anything else as it is)."""
    if not hasattr(value, "to_host"):
        return value
    if value._is_mappable():
        return np.asarray(value.to_host())
    return _staged_copy(value)


def _staged_copy(value) -> np.ndarray:
    """The device array copied by the device into a host-visible buffer it allocated itself."""
    import iree.runtime as rt

    device, source = value._device, value._buffer_view.get_buffer()
    staging = device.allocator.allocate_buffer(
        memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
        allocation_size=source.byte_length())
    done = device.create_semaphore(0)
    device.queue_copy(source, staging, wait_semaphores=rt.HalFence.create_at(done, 0),
                      signal_semaphores=rt.HalFence.create_at(done, 1))
    rt.HalFence.create_at(done, 1).wait()
    raw = rt.HalElementType.map_to_dtype(value._buffer_view.element_type)
    out = np.array(staging.map().asarray(value._buffer_view.shape, raw), copy=True)
    return out.astype(value.dtype) if value.dtype != raw else out
