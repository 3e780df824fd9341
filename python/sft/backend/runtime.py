"""Running compiled modules in-process with iree.runtime."""

from __future__ import annotations

import numpy as np

from .iree import Artifact

_CONFIGS: dict[str, object] = {}


def _config(driver: str):
    """One runtime config (device and thread pool) per driver and process, shared by every
    loaded module, so that modules timed side by side do not compete with each other's workers."""
    import iree.runtime as rt

    if driver not in _CONFIGS:
        _CONFIGS[driver] = rt.Config(driver)
    return _CONFIGS[driver]


class Loaded:
    """A compiled module loaded in the IREE runtime: call it with numpy arrays."""

    def __init__(self, artifact: Artifact, entry: str = "main", driver: str = ""):
        import iree.runtime as rt

        self.artifact = artifact
        self._ctx = rt.SystemContext(config=_config(driver or artifact.target.driver))
        self._ctx.add_vm_module(rt.VmModule.copy_buffer(self._ctx.instance, artifact.vmfb))
        self._fn = self._ctx.modules.module[entry]

    def __call__(self, *arrays) -> list[np.ndarray]:
        """Results on the host (numpy arrays; a scalar result, an i64 say, as a Python number)."""
        return [to_host(o) for o in self.call_on_device(*arrays)]

    def call_on_device(self, *arrays) -> list:
        """Results as they are: device arrays stay on the device (to be passed to a later call
        without a copy through the host)."""
        out = self._fn(*arrays)
        if out is None:  # a function with no results
            return []
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def upload(self, array: np.ndarray):
        """`array` copied to the device once, to be passed to many calls."""
        import iree.runtime as rt

        return rt.asdevicearray(self._ctx.config.device, np.ascontiguousarray(array)
                                if array.ndim else array)


def to_host(value):
    return np.asarray(value.to_host()) if hasattr(value, "to_host") else value


def load(artifact: Artifact, entry: str = "main", driver: str = "") -> Loaded:
    """Load a module on `driver` (the target's own when empty)."""
    return Loaded(artifact, entry, driver)
