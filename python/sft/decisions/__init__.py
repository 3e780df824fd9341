"""Decision records and their codecs: the layer below the plan, the spaces and the cost models.

A kernel decision exists in four forms, and only this package converts between them: a
candidate row (integers, so that spaces hold millions in numpy arrays), a frozen record (what a
`Plan` holds, hashes and replays), the IREE attribute text that imposes it, and IREE's own choice
as the profile parsed it (read back into a row, so that the model scores IREE's default like
any candidate). One module per codegen: `cpu_tiles` (IREE's llvm-cpu pipeline) and `gpu_tiles`
(its GPU pipelines). Nothing here imports the rest of sft: the space, the plan, the cost models,
the backend and the tools depend on it, never the reverse.
"""

from __future__ import annotations

import json

from .cpu_tiles import TileConfig
from .gpu_tiles import GpuConfig

KernelConfig = TileConfig | GpuConfig


def config_from_dict(value, what: str = "config") -> KernelConfig:
    """A kernel config from its JSON data: a GPU config (it has a `workgroup` tile) or a CPU
    one. Anything else is a ValueError or TypeError naming `what`."""
    if isinstance(value, dict) and "workgroup" in value:
        try:
            return GpuConfig.from_dict(value)
        except (ValueError, TypeError) as err:
            raise type(err)(f"{what}: {err}") from None
    return TileConfig.from_dict(value, what)


def canonical(config: KernelConfig | None) -> str:
    """The config's canonical JSON (sorted keys, lists): the tuning database's key for a
    measured candidate; "null" for IREE's own choice."""
    return json.dumps(None if config is None else config.to_dict(), sort_keys=True)


__all__ = ["TileConfig", "GpuConfig", "KernelConfig", "config_from_dict", "canonical"]
