"""One group of the run, in a worker process of its own: every module loaded, run once and
checked, then everything timed in turns. What it finds is saved after every step, so that a
crash or a kill past the deadline loses only the step it was on (the parent reads which)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
import traceback

import numpy as np

from . import anchors
from .common import ensure_iree, error_text, find_model, host_copy, item_key, read_manifest
from .numerics import bf16, compare, compare_all, decode

CRASH_ENV = "SFT_GPU_CHECK_CRASH"  # testing hook: a worker crashes when it begins this item
ROUND_S = 0.02  # each variant's share of one round (calls per round chosen to fill it)
MAX_CALLS = 2000
SKIPPED = "crashed or hung the worker in an earlier try: skipped"


class Item:
    """One thing to time: `call()` does one call; `sync()` waits for the device."""

    def __init__(self, key, call, sync=lambda: None):
        self.key, self.call, self.sync = key, call, sync


def time_items(items: list, rounds: int, deadline: float) -> dict:
    """Median seconds per call of each item, timed in turns, round after round (the order
    rotated each round). Calls per round fill ROUND_S; rounds are cut to meet `deadline`."""
    if not items:
        return {}
    per, calls = {}, {}
    for item in items:  # a first estimate, after the warm-up the checks did
        start = time.perf_counter()
        item.call()
        item.sync()
        per[item.key] = max(time.perf_counter() - start, 1e-7)
        calls[item.key] = max(1, min(MAX_CALLS, int(ROUND_S / per[item.key])))
    one_round = sum(per[k] * calls[k] for k in per) * 1.2 + 1e-3
    rounds = max(1, min(rounds, int((deadline - time.time()) / one_round)))
    samples = {item.key: [] for item in items}
    for r in range(rounds):
        for item in items[r % len(items):] + items[:r % len(items)]:
            n = calls[item.key]
            start = time.perf_counter()
            for _ in range(n):
                item.call()
            item.sync()
            samples[item.key].append((time.perf_counter() - start) / n)
    return {k: {"median_s": statistics.median(v), "samples_s": v, "calls": calls[k], "rounds": rounds}
            for k, v in samples.items()}


class Worker:
    """The state of one group's worker process."""

    def __init__(self, args, manifest):
        self.args, self.manifest, self.root = args, manifest, args.dir
        self.deadline = args.deadline
        self.skip = set(args.skip or [])
        self.tol = manifest["tolerances"]
        self.results: dict = {}
        self.configs: dict = {}
        self.progress = open(args.progress, "a") if args.progress else None

    def mark(self, what: str, key: str) -> None:
        """begin/end of a risky step, for the parent to know what a crash was on."""
        if self.progress:
            self.progress.write(f"{what} {key}\n")
            self.progress.flush()

    def save(self, complete: bool = False) -> None:
        """What was found so far, for the parent (atomically: a kill mid-write loses nothing)."""
        self.results["_complete"] = complete
        with open(self.args.worker_out + ".tmp", "w") as f:
            json.dump(self.results, f, default=str)
        os.replace(self.args.worker_out + ".tmp", self.args.worker_out)

    def attempt(self, key: str, start, check, timed_as: str, sync=lambda: None) -> Item | None:
        """One risky step: `start()` -> (call, its first outputs), `check(outputs)` -> the
        numerics record, the seconds `start` took as `timed_as`; any failure is recorded, never
        fatal. Returns what to time: None if it failed to run or was skipped."""
        record = self.results.setdefault(key, {"ok": False})
        if key in self.skip:
            record["error"] = SKIPPED
            return None
        self.mark("begin", key)
        if os.environ.get(CRASH_ENV) == key:  # the tests' stand-in for a driver that segfaults
            os.kill(os.getpid(), signal.SIGSEGV)
        call = None
        try:
            began = time.perf_counter()
            call, outputs = start()
            record[timed_as] = time.perf_counter() - began
            record.update(check(outputs))
        except Exception as err:  # any failure of IREE's runtime, its driver or torch
            record.update(ok=False, error=error_text(err))
        self.mark("end", key)
        self.save()
        # Timed whenever it runs, right or wrong: a kernel config's time is worth seeing beside
        # its numerics failure, and an anchor is what PyTorch users get even where its numerics
        # differ (cuDNN's TF32 convolutions, say). The summary only picks among the right ones.
        return Item(key, call, sync) if call is not None else None

    # --- IREE -----------------------------------------------------------------------------

    def config(self, driver: str):
        """The runtime config (device) of a driver, made once; a device that cannot be made
        fails every module on it at once, not once per module."""
        import iree.runtime as rt

        if driver not in self.configs:
            try:
                self.configs[driver] = rt.Config(driver)
            except Exception as err:
                self.configs[driver] = err
        if isinstance(self.configs[driver], Exception):
            raise self.configs[driver]
        return self.configs[driver]

    def driver_of(self, variant_driver: str) -> str:
        """A variant's own driver (a plan may choose local-sync) else --driver."""
        return variant_driver or self.args.driver

    def load(self, file: str, entry: str, driver: str, arrays: list):
        """(call, outputs of one call as host arrays) of a module, its arguments uploaded once."""
        import iree.runtime as rt

        config = self.config(driver)
        ctx = rt.SystemContext(config=config)
        with open(os.path.join(self.root, file), "rb") as f:
            vm = rt.VmModule.copy_buffer(ctx.instance, f.read())
        ctx.add_vm_module(vm)
        fn = ctx.modules[vm.name][entry]
        device = [rt.asdevicearray(config.device, np.ascontiguousarray(a) if a.ndim else a)
                  for a in arrays]

        def call():
            return fn(*device)

        out = call()
        out = list(out) if isinstance(out, (list, tuple)) else ([] if out is None else [out])
        to_host = host_copy().to_host
        return call, [to_host(o) for o in out]

    def iree_items(self, modules, entry: str, arrays: list, check) -> list:
        """Each distinct (file, driver) of `modules` loaded on its driver and checked; results
        are keyed by module and driver (one .vmfb may run on two)."""
        return [self.attempt(item_key(file, driver),
                             lambda: self.load(file, entry, driver, arrays), check, "load_s")
                for file, driver in dict.fromkeys(modules)]

    def finish(self, items: list) -> None:
        """The items that ran, timed in turns until just before the deadline."""
        self.mark("begin", "timing")
        ready = [i for i in items if i is not None]
        for key, timing in time_items(ready, self.args.rounds, self.deadline - 2.0).items():
            self.results[key].update(timing)
        self.mark("end", "timing")
        self.save()

    # --- groups ---------------------------------------------------------------------------

    def model_data(self, m: dict):
        """(npz, arguments, [(output entry, expected array)]) of a model."""
        data = np.load(os.path.join(self.root, m["npz"]))
        args = [decode(data[a["key"]], a["dtype"]) for a in m["args"]]
        return data, args, [(o, decode(data[o["key"]], o["dtype"])) for o in m["outputs"]]

    def model(self, m: dict) -> None:
        """One model: every distinct module, PyTorch eager and torch.compile, timed in turns."""
        data, args, expected = self.model_data(m)

        def check(outputs):
            if not expected:
                return {"ok": True, "numerics": "not checked (no expected outputs)"}
            missing = [o["result"] for o, _ in expected if o["result"] >= len(outputs)]
            if missing:
                return {"ok": False, "error": f"{len(outputs)} results, expected output at {missing[0]}"}
            return compare_all(((outputs[o["result"]], want, o["dtype"]) for o, want in expected), self.tol)

        modules = [(v["file"], self.driver_of(v.get("driver", ""))) for v in m["variants"]]
        items = self.iree_items(modules, m["entry"], args, check)
        try:
            items += anchors.model_items(self, m, data, expected)
        except Exception as err:  # no torch, or DIR's models.py does not load: IREE's still timed
            for key in ("eager", "torch_compile"):
                self.results.setdefault(key, {}).update(ok=False, error=f"{type(err).__name__}: {err}")
        self.finish(items)

    def kernels(self, kernels: list) -> None:
        """Each kernel's configs, alone, on random inputs, against numpy's einsum (float64);
        the configs of one kernel are timed in turns."""
        for k in kernels:
            rng = np.random.default_rng(k["seed"])
            dtype = {"float16": np.float16, "float32": np.float32, "float64": np.float64}[k["dtype"]]
            arrays = [rng.standard_normal(s).astype(dtype) for s in k["input_shapes"]]
            want = np.einsum(k["einsum"], *(a.astype(np.float64) for a in arrays), optimize=True)

            def check(outputs, want=want, dtype=k["dtype"]):
                if len(outputs) != 1:
                    return {"ok": False, "error": f"{len(outputs)} results, expected 1"}
                return compare(outputs[0], want, dtype, self.tol)

            modules = [(c["file"], self.driver_of(k["driver"])) for c in k["candidates"] if "file" in c]
            self.finish(self.iree_items(modules, k["entry"], arrays, check))

    def gemm(self, g: dict) -> None:
        """The bf16 GEMM under each config, and torch.matmul in bf16 on the same device as the
        anchor; the reference is the f32 product of the same bf16 values."""
        n = g["n"]
        rng = np.random.default_rng(g["seed"])
        a, b = (rng.standard_normal((n, n), dtype=np.float32).astype(bf16()) for _ in range(2))
        want, anchor = anchors.matmul(self, a, b)

        def check(outputs):
            return compare(outputs[0], want, "float32", self.tol) if outputs else {"ok": False,
                                                                                 "error": "no result"}

        modules = [(v["file"], self.driver_of(v.get("driver", ""))) for v in g["variants"]]
        items = self.iree_items(modules, g["entry"], [a, b], check)
        if anchor is None:
            self.results["torch_matmul"] = {"ok": False, "error": "no torch here"}
        else:
            items.append(anchor())
        self.finish(items)


def worker_main(args) -> int:
    """A worker's life: one group (--worker KIND[:MODEL]), its results in --worker-out."""
    manifest = read_manifest(args.dir)
    if args.deadline is None:  # run by hand
        args.deadline = time.time() + 300.0
    ensure_iree(args.dir)
    w = Worker(args, manifest)
    kind, _, name = args.worker.partition(":")
    try:
        if kind == "gemm":
            w.gemm(manifest["gemm"])
        elif kind == "model":
            w.model(find_model(manifest, name))
        elif kind == "warm":  # torch.compile only, to fill inductor's caches
            m = find_model(manifest, name)
            data, _, expected = w.model_data(m)
            anchors.model_items(w, m, data, expected)
        elif kind == "kernels":
            ids = find_model(manifest, name)["kernels"]
            w.kernels([k for k in manifest["kernels"] if k["id"] in ids and k["users"][0]["model"] == name])
    except Exception:  # a bug or a broken input: what was measured so far still comes back
        w.results["_error"] = traceback.format_exc()[-1500:]
    w.save(complete=True)
    return 0
