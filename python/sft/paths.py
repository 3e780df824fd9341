"""Where sft keeps what it learns between runs: compiled modules, the tuning database and the
host calibration. `SFT_CACHE_DIR` moves all of it (tests point it at a temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SFT_CACHE_DIR"


def cache_dir() -> Path:
    path = Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "sft"))
    path.mkdir(parents=True, exist_ok=True)
    return path
