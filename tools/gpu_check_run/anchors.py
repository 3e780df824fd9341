"""PyTorch's side of a group, the anchors: the model in eager mode and under torch.compile, and
torch.matmul for the GEMM, on the device the IREE modules run on."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import numpy as np

from .numerics import compare, compare_all, decode


def device(worker):
    import torch

    gpu = worker.args.driver in ("cuda", "hip") and torch.cuda.is_available()
    return torch.device("cuda" if gpu else "cpu")


def sync(worker):
    """What waits for torch's work on the device."""
    import torch

    return torch.cuda.synchronize if device(worker).type == "cuda" else (lambda: None)


def to_torch(a):
    """A numpy array (bf16 included, as ml_dtypes') as a torch tensor on the CPU."""
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def to_numpy(t):
    """A torch tensor on the host as numpy (bf16 as f32: numpy has none of its own)."""
    import torch

    t = t.detach().cpu()
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def torch_item(worker, key: str, build, check):
    """A torch callable built (`build()` -> call; torch.compile compiles in its first call),
    run once and checked; None if it failed or was skipped."""
    wait = sync(worker)

    def start():
        ready = build()
        out = ready()
        wait()
        return ready, out

    return worker.attempt(key, start, check, "warmup_s", wait)


def compile_allowed(worker) -> bool:
    """Whether torch.compile may run now (else why not, in its record)."""
    left = worker.deadline - time.time()
    if worker.args.no_torch_compile:
        worker.results["torch_compile"] = {"ok": False, "error": "skipped (--no-torch-compile)"}
    elif worker.args.compile_budget <= 0 or left < 10:
        worker.results["torch_compile"] = {"ok": False, "error": "skipped: time budget spent"}
    else:
        return True
    return False


def model_items(worker, m: dict, data, expected) -> list:
    """PyTorch eager and torch.compile of the model (from DIR's models.py) on the device, its
    state loaded from the npz (the weights IREE's modules get), on the same inputs. A warm:
    worker (the cache-filling pass) builds torch.compile's only."""
    import torch

    where = device(worker)
    spec = importlib.util.spec_from_file_location(
        "sft_gpu_check_models", os.path.join(worker.root, worker.manifest["models_py"]))
    models = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = models  # dataclasses look the module up by name
    spec.loader.exec_module(models)

    def builder(compiled: bool):
        def build():
            model = models.BENCH_SUITE[m["name"]].build()
            own = model.state_dict()
            model.load_state_dict({a["name"]: to_torch(decode(data[a["key"]], a["dtype"])) for a in m["args"]
                                   if a["role"] == "state" and a["name"] in own}, strict=False)
            inputs = [to_torch(decode(data[a["key"]], a["dtype"])).to(where)
                      for a in m["args"] if a["role"] == "input"]
            model = model.to(where).eval()
            fn = torch.compile(model) if compiled else model

            def call():
                with torch.no_grad():
                    return fn(*inputs)
            return call
        return build

    def check(out):
        leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if len(leaves) != len(expected):
            return {"ok": len(expected) == 0, "error": f"{len(leaves)} tensors, {len(expected)} expected"}
        return compare_all(((to_numpy(got), want, o["dtype"]) for (o, want), got in zip(expected, leaves)),
                           worker.tol)

    if worker.args.worker.startswith("warm:"):
        return [torch_item(worker, "torch_compile", builder(True), check)]
    items = [torch_item(worker, "eager", builder(False), check)]
    if compile_allowed(worker):
        items.append(torch_item(worker, "torch_compile", builder(True), check))
    return items


def matmul(worker, a, b):
    """(the GEMM's reference, the f32 product of the bf16 values; a function that makes the
    torch.matmul anchor's item, None without torch)."""
    try:
        import torch
    except ImportError:
        return a.astype(np.float32) @ b.astype(np.float32), None
    ta, tb = (to_torch(x).to(device(worker)) for x in (a, b))
    torch.backends.cuda.matmul.allow_tf32 = False  # an f32 reference, not TF32
    want = torch.matmul(ta.float(), tb.float()).cpu().numpy()
    return want, lambda: torch_item(worker, "torch_matmul", lambda: (lambda: torch.matmul(ta, tb)),
                                    lambda out: compare(out.float().cpu().numpy(), want, "bfloat16",
                                                        worker.tol))
