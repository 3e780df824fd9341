"""What the parent and its workers share: the manifest, IREE's runtime, result keys, errors."""

from __future__ import annotations

import functools
import glob
import importlib
import json
import os
import subprocess
import sys
import tempfile

SITE = os.path.join(tempfile.gettempdir(), "sft-gpu-check-site")
# The script that starts a worker (this package's entry point).
ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu_check_run.py")


@functools.lru_cache(maxsize=1)
def host_copy():
    """sft's device-to-host read-back (python/sft/backend/host_copy.py, numpy and iree.runtime
    only), loaded by path once: a GPU's results go through a staging buffer the device allocates."""
    import importlib.util

    path = os.path.join(os.path.dirname(ENTRY), "..", "python", "sft", "backend", "host_copy.py")
    spec = importlib.util.spec_from_file_location("sft_host_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log(text: str) -> None:
    print(text, flush=True)


def error_text(err: BaseException) -> str:
    """An exception in one line, with what caused it (IREE chains the driver's own error)."""
    parts = []
    while err is not None and len(parts) < 3:
        first = (str(err).strip().splitlines() or [""])[0]
        parts.append(f"{type(err).__name__}: {first[:300]}")
        err = err.__cause__ or err.__context__
    return " <- ".join(parts)


def item_key(file: str, driver: str) -> str:
    """What a result is keyed by: the module and the driver it ran on."""
    return f"{file}@{driver}"


def read_manifest(root: str) -> dict:
    with open(os.path.join(root, "manifest.json")) as f:
        return json.load(f)


def find_model(manifest: dict, name: str) -> dict:
    return next(m for m in manifest["models"] if m["name"] == name)


def ensure_iree(root: str) -> None:
    """`import iree.runtime`, installing DIR's wheel into a private folder first if need be."""
    try:
        importlib.import_module("iree.runtime")
        return
    except ImportError:
        pass
    wheels = sorted(glob.glob(os.path.join(root, "*.whl")))
    if not wheels:
        raise SystemExit("gpu_check_run: iree.runtime is not installed and DIR has no wheel")
    if not os.path.isdir(os.path.join(SITE, "iree")):
        # Every wheel in DIR (the runtime; any missing dependency carried beside it).
        log(f"installing {', '.join(os.path.basename(w) for w in wheels)} into {SITE}")
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                               "--no-deps", "--no-compile", "--disable-pip-version-check",
                               "--target", SITE, *wheels])
    sys.path.insert(0, SITE)
    importlib.import_module("iree.runtime")


def runtime_env() -> dict:
    """The environment of a worker: the private site folder, if one was made, on its path."""
    env = dict(os.environ)
    if os.path.isdir(SITE) and SITE in sys.path:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    return env
