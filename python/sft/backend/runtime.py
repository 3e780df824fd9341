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

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        out = self._fn(*arrays)
        outs = out if isinstance(out, (tuple, list)) else [out]
        # A scalar result (an i64 the function returns) comes back as a Python number.
        return [np.asarray(o.to_host()) if hasattr(o, "to_host") else o for o in outs]


def load(artifact: Artifact, entry: str = "main", driver: str = "") -> Loaded:
    """Load a module on `driver` (the target's own when empty)."""
    return Loaded(artifact, entry, driver)
