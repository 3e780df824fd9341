#!/usr/bin/env python3
"""gpu_check_run.py DIR: the run phase of tools/gpu-check, on the machine with the GPU.

Standalone on purpose: it never imports sft (whose package loads IREE's compiler bindings, which
that machine does not have). It needs numpy, IREE's runtime (installed from the wheel in DIR
when `import iree.runtime` fails) and torch for the anchors.

    python3 tools/gpu_check_run.py DIR [--out RESULT.json] [--driver cuda] [--rounds 7]

DIR is what `gpu-check prepare` wrote (manifest.json, modules/*.vmfb, models/*.npz, models.py).
The work is split into groups (the bf16 GEMM, one per model, one per model's kernels), each
run in a worker process of its own: a driver that crashes or hangs on one module costs that
group (retried once without the module it was on), never the run. Per group: every module is
loaded, run once and checked against the expected outputs; then every variant (the IREE
modules, PyTorch eager and torch.compile on the same device) is timed in turns, round after
round, and the medians kept. IREE calls are synchronous (the module's native ABI waits on the
work's fence before it returns), inputs and the model's state live on the device, results stay
there; torch's are followed by torch.cuda.synchronize(). Everything is budgeted to finish
within --budget seconds (default 450), whatever fails.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

CRASH_ENV = "SFT_GPU_CHECK_CRASH"  # testing hook: a worker crashes when it begins this item
MARGIN = 0.03            # sft verify's rule: a measured gain under 3% keeps IREE's default
SITE = os.path.join(tempfile.gettempdir(), "sft-gpu-check-site")
GROUP_CAPS = {"gemm": 90.0, "model": 120.0, "kernels": 60.0}  # seconds a group may take at most
GROUP_WEIGHTS = {"gemm": 2.0, "model": 3.0, "kernels": 1.0}  # its share of the time left
GROUP_FLOORS = {"gemm": 30.0, "model": 30.0, "kernels": 15.0}  # ... but at least this
ROUND_S = 0.02           # each variant's share of one round (calls per round chosen to fill it)
MAX_CALLS = 2000
DEFAULT_TOL = {"float64": [1e-6, 1e-8], "float32": [1e-3, 1e-4], "float16": [2e-2, 2e-2],
               "bfloat16": [2e-2, 2e-2]}


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


# --------------------------------------------------------------------------- the runtime

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


def bf16():
    import ml_dtypes

    return ml_dtypes.bfloat16


def decode(array, dtype: str):
    """An array as the manifest says it is (bf16 is stored as its bits)."""
    return array.view(bf16()) if dtype == "bfloat16" else array


# ------------------------------------------------------------------------------ numerics

def compare(got, expected, dtype: str, tolerances: dict) -> dict:
    """Whether `got` matches `expected`: exactly for integers and booleans, else within
    atol * max(1, max|expected|) + rtol * |expected| (tolerances by dtype)."""
    import numpy as np

    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return {"ok": False, "error": f"shape {list(got.shape)}, expected {list(expected.shape)}"}
    if dtype not in tolerances:
        same = bool(np.array_equal(got.astype(np.int64), expected.astype(np.int64)))
        return {"ok": same, "error": None if same else "values differ"}
    rtol, atol = tolerances[dtype]
    g, e = got.astype(np.float64), expected.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
    err = np.abs(g - e)
    finite = bool(np.all(np.isfinite(g) == np.isfinite(e)))
    ok = finite and bool(np.all((err <= atol * scale + rtol * np.abs(e)) | (g == e)))
    worst = float(np.nanmax(err)) if err.size else 0.0
    return {"ok": ok, "max_abs_err": worst, "scale": scale,
            "error": None if ok else f"max |error| {worst:.3g} over tolerance (scale {scale:.3g})"}


# ------------------------------------------------------------------------------ timing

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
    left = deadline - time.time()
    rounds = max(1, min(rounds, int(left / one_round)))
    samples = {item.key: [] for item in items}
    for r in range(rounds):
        order = items[r % len(items):] + items[:r % len(items)]
        for item in order:
            n = calls[item.key]
            start = time.perf_counter()
            for _ in range(n):
                item.call()
            item.sync()
            samples[item.key].append((time.perf_counter() - start) / n)
    return {k: {"median_s": statistics.median(v), "samples_s": v, "calls": calls[k], "rounds": rounds}
            for k, v in samples.items()}


# ------------------------------------------------------------------------------ workers

class Worker:
    """The state of one group's worker process."""

    def __init__(self, args, manifest):
        import numpy as np

        self.np = np
        self.args, self.manifest, self.root = args, manifest, args.dir
        self.deadline = args.deadline
        self.skip = set(args.skip or [])
        self.tol = manifest.get("tolerances", DEFAULT_TOL)
        self.results: dict = {}
        self.configs: dict = {}
        self.progress = open(args.progress, "a") if args.progress else None

    def mark(self, what: str, key: str) -> None:
        """begin/end of a risky step, for the parent to know what a crash was on."""
        if self.progress:
            self.progress.write(f"{what} {key}\n")
            self.progress.flush()

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

    def save(self, complete: bool = False) -> None:
        """What was found so far, for the parent (atomically: a kill mid-write loses nothing)."""
        self.results["_complete"] = complete
        with open(self.args.worker_out + ".tmp", "w") as f:
            json.dump(self.results, f, default=str)
        os.replace(self.args.worker_out + ".tmp", self.args.worker_out)

    def load(self, file: str, entry: str, driver: str, arrays: list):
        """(call, outputs of one call as host arrays) of a module, its arguments uploaded once."""
        import iree.runtime as rt

        config = self.config(driver)
        ctx = rt.SystemContext(config=config)
        with open(os.path.join(self.root, file), "rb") as f:
            vm = rt.VmModule.copy_buffer(ctx.instance, f.read())
        ctx.add_vm_module(vm)
        fn = ctx.modules[vm.name][entry]
        device = [rt.asdevicearray(config.device, self.np.ascontiguousarray(a) if a.ndim else a)
                  for a in arrays]

        def call():
            return fn(*device)

        out = call()
        out = list(out) if isinstance(out, (list, tuple)) else ([] if out is None else [out])
        return call, [self.np.asarray(o.to_host()) if hasattr(o, "to_host") else o for o in out]

    def iree_item(self, file: str, entry: str, driver: str, arrays: list, check) -> Item | None:
        """A module loaded on `driver` and checked (`check(outputs)` -> numerics record); None
        if it failed. Results are keyed by module and driver (one .vmfb may run on two)."""
        key = item_key(file, driver)
        record = self.results.setdefault(key, {"ok": False})
        if key in self.skip:
            record["error"] = "crashed or hung the worker in an earlier try: skipped"
            return None
        self.mark("begin", key)
        if os.environ.get(CRASH_ENV) == key:  # the tests' stand-in for a driver that segfaults
            os.kill(os.getpid(), signal.SIGSEGV)
        call = None
        try:
            start = time.perf_counter()
            call, outputs = self.load(file, entry, driver, arrays)
            record["load_s"] = time.perf_counter() - start
            record.update(check(outputs))
        except Exception as err:  # any failure of IREE's runtime or driver: recorded
            record.update(ok=False, error=error_text(err))
        self.mark("end", key)
        self.save()
        # Timed whenever it runs, right or wrong: a kernel config's time is worth seeing beside
        # its numerics failure (the summary only picks among the right ones).
        return Item(key, call) if call is not None else None

    def finish(self, items: list, rounds: int) -> None:
        self.mark("begin", "timing")
        for key, timing in time_items(items, rounds, self.deadline - 2.0).items():
            self.results[key].update(timing)
        self.mark("end", "timing")
        self.save()

    # --- torch ----------------------------------------------------------------------------

    def torch_device(self):
        import torch

        gpu = self.args.driver in ("cuda", "hip") and torch.cuda.is_available()
        return torch.device("cuda" if gpu else "cpu")

    def torch_sync(self):
        import torch

        return torch.cuda.synchronize if self.torch_device().type == "cuda" else (lambda: None)

    def torch_item(self, key: str, build, check) -> Item | None:
        """A torch callable built (`build()` -> call; torch.compile compiles in its first
        call), run once and checked; None if it failed or was skipped."""
        record = self.results.setdefault(key, {"ok": False})
        if key in self.skip:
            record["error"] = "crashed or hung the worker in an earlier try: skipped"
            return None
        self.mark("begin", key)
        call = None
        try:
            start = time.perf_counter()
            ready = build()
            out = ready()
            self.torch_sync()()
            call = ready
            record["warmup_s"] = time.perf_counter() - start
            record.update(check(out))
        except Exception as err:  # torch's failures too are recorded, never fatal
            record.update(ok=False, error=error_text(err))
        self.mark("end", key)
        self.save()
        # Timed when it runs, even where its numerics differ (cuDNN's TF32 convolutions, say):
        # the anchor is what PyTorch users get; the difference is reported beside it.
        return Item(key, call, self.torch_sync()) if call is not None else None

    def compile_allowed(self) -> bool:
        left = self.deadline - time.time()
        if self.args.no_torch_compile:
            self.results["torch_compile"] = {"ok": False, "error": "skipped (--no-torch-compile)"}
        elif self.args.compile_budget <= 0 or left < 10:
            self.results["torch_compile"] = {"ok": False, "error": "skipped: time budget spent"}
        else:
            return True
        return False

    # --- groups ---------------------------------------------------------------------------

    def model(self, m: dict) -> None:
        """One model: every distinct module, PyTorch eager and torch.compile, timed in turns."""
        np = self.np
        data = np.load(os.path.join(self.root, m["npz"]))
        args = [decode(data[a["key"]], a["dtype"]) for a in m["args"]]
        expected = [(o, decode(data[o["key"]], o["dtype"])) for o in m["outputs"]]

        def check(outputs):
            if not expected:
                return {"ok": True, "numerics": "not checked (no expected outputs)"}
            worst = {"ok": True}
            for o, want in expected:
                if o["result"] >= len(outputs):
                    return {"ok": False, "error": f"{len(outputs)} results, expected output at {o['result']}"}
                got = outputs[o["result"]]
                found = compare(got, want, o["dtype"], self.tol)
                if not found["ok"] or found.get("max_abs_err", 0) >= worst.get("max_abs_err", 0):
                    worst = found
                if not found["ok"]:
                    break
            return worst

        items, seen = [], set()
        for v in m["variants"]:
            driver = self.driver_of(v.get("driver", ""))
            if item_key(v["file"], driver) not in seen:
                seen.add(item_key(v["file"], driver))
                items.append(self.iree_item(v["file"], m["entry"], driver, args, check))
        try:
            items += self.torch_items(m, data, expected)
        except Exception as err:  # no torch, or DIR's models.py does not load: IREE's still timed
            for key in ("eager", "torch_compile"):
                self.results.setdefault(key, {}).update(ok=False, error=f"{type(err).__name__}: {err}")
        self.finish([i for i in items if i is not None], self.args.rounds)

    def torch_items(self, m: dict, data, expected) -> list:
        """PyTorch eager and torch.compile of the model (from DIR's models.py) on the device,
        its state loaded from the npz (the weights IREE's modules get), on the same inputs."""
        import torch

        np = self.np
        device = self.torch_device()
        spec = importlib.util.spec_from_file_location("sft_gpu_check_models",
                                                      os.path.join(self.root, self.manifest["models_py"]))
        models = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = models  # dataclasses look the module up by name
        spec.loader.exec_module(models)

        def tensor(a, dtype):
            a = decode(a, dtype)
            if dtype == "bfloat16":
                return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
            return torch.from_numpy(np.array(a))

        def model_and_inputs():
            model = models.BENCH_SUITE[m["name"]].build()
            own = model.state_dict()
            state = {a["name"]: tensor(data[a["key"]], a["dtype"]) for a in m["args"]
                     if a["role"] == "state" and a["name"] in own}
            model.load_state_dict(state, strict=False)
            inputs = [tensor(data[a["key"]], a["dtype"]).to(device) for a in m["args"] if a["role"] == "input"]
            return model.to(device).eval(), inputs

        def check(out):
            leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            if len(leaves) != len(expected):
                return {"ok": len(expected) == 0, "error": f"{len(leaves)} tensors, {len(expected)} expected"}
            worst = {"ok": True}
            for (o, want), got in zip(expected, leaves):
                got = got.detach().cpu()
                got = got.float().numpy() if got.dtype == torch.bfloat16 else got.numpy()
                found = compare(got, want, o["dtype"], self.tol)
                if not found["ok"] or found.get("max_abs_err", 0) >= worst.get("max_abs_err", 0):
                    worst = found
            return worst

        def eager():
            model, inputs = model_and_inputs()

            def call():
                with torch.no_grad():
                    return model(*inputs)
            return call

        def compiled():
            model, inputs = model_and_inputs()
            fast = torch.compile(model)

            def call():
                with torch.no_grad():
                    return fast(*inputs)
            return call

        if self.args.worker.startswith("warm:"):  # the cache-filling pass: torch.compile only
            return [self.torch_item("torch_compile", compiled, check)]
        items = [self.torch_item("eager", eager, check)]
        if self.compile_allowed():
            items.append(self.torch_item("torch_compile", compiled, check))
        return items

    def kernels(self, kernels: list) -> None:
        """Each kernel's configs, alone, on random inputs, against numpy's einsum (float64);
        the configs of one kernel are timed in turns."""
        np = self.np
        for k in kernels:
            rng = np.random.default_rng(k["seed"])
            dtype = {"float16": np.float16, "float32": np.float32, "float64": np.float64}[k["dtype"]]
            arrays = [rng.standard_normal(s).astype(dtype) for s in k["input_shapes"]]
            want = np.einsum(k["einsum"], *(a.astype(np.float64) for a in arrays), optimize=True)

            def check(outputs, want=want, dtype=k["dtype"]):
                if len(outputs) != 1:
                    return {"ok": False, "error": f"{len(outputs)} results, expected 1"}
                return compare(outputs[0], want, dtype, self.tol)

            items = []
            for c in k["candidates"]:
                if "file" in c:
                    items.append(self.iree_item(c["file"], k["entry"], self.driver_of(k["driver"]),
                                                arrays, check))
            self.finish([i for i in items if i is not None], self.args.rounds)

    def gemm(self, g: dict) -> None:
        """The bf16 GEMM under each config, and torch.matmul in bf16 on the same device as the
        anchor; the reference is the f32 product of the same bf16 values."""
        np = self.np
        n = g["n"]
        rng = np.random.default_rng(g["seed"])
        a, b = (rng.standard_normal((n, n), dtype=np.float32).astype(bf16()) for _ in range(2))
        torch = None
        try:
            import torch
        except ImportError:
            pass
        device = self.torch_device() if torch is not None else None
        if torch is not None:
            ta, tb = (torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16).to(device)
                      for x in (a, b))
            torch.backends.cuda.matmul.allow_tf32 = False  # an f32 reference, not TF32
            want = torch.matmul(ta.float(), tb.float()).cpu().numpy()
        else:
            want = a.astype(np.float32) @ b.astype(np.float32)

        def check(outputs):
            return compare(outputs[0], want, "float32", self.tol) if outputs else {"ok": False,
                                                                                 "error": "no result"}

        items, seen = [], set()
        for v in g["variants"]:
            driver = self.driver_of(v.get("driver", ""))
            if item_key(v["file"], driver) not in seen:
                seen.add(item_key(v["file"], driver))
                items.append(self.iree_item(v["file"], g["entry"], driver, [a, b], check))
        if torch is None:
            self.results["torch_matmul"] = {"ok": False, "error": "no torch here"}
        else:
            items.append(self.torch_item("torch_matmul", lambda: (lambda: torch.matmul(ta, tb)),
                                         lambda out: compare(out.float().cpu().numpy(), want,
                                                             "bfloat16", self.tol)))
        self.finish([i for i in items if i is not None], self.args.rounds)


def worker_main(args) -> int:
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    if args.deadline is None:  # run by hand
        args.deadline = time.time() + 300.0
    ensure_iree(args.dir)
    w = Worker(args, manifest)
    kind, _, name = args.worker.partition(":")
    try:
        if kind == "gemm":
            w.gemm(manifest["gemm"])
        elif kind == "model":
            w.model(next(m for m in manifest["models"] if m["name"] == name))
        elif kind == "warm":
            m = next(m for m in manifest["models"] if m["name"] == name)
            data = w.np.load(os.path.join(args.dir, m["npz"]))
            w.torch_items(m, data, [(o, decode(data[o["key"]], o["dtype"])) for o in m["outputs"]])
        elif kind == "kernels":
            ids = next(m for m in manifest["models"] if m["name"] == name)["kernels"]
            owned = [k for k in manifest["kernels"] if k["id"] in ids and k["users"][0]["model"] == name]
            w.kernels(owned)
    except Exception:  # a bug or a broken input: what was measured so far still comes back
        w.results["_error"] = traceback.format_exc()[-1500:]
    w.save(complete=True)
    return 0


# ------------------------------------------------------------------------------ the parent

def run_group(args, group: str, deadline: float, last_deadline: float, compile_budget: float) -> dict:
    """One group in a worker process (killed past `deadline`). A worker that crashes or hangs
    is tried once more, until `last_deadline` at the latest, without the module (or torch
    variant) it was on; what it had found before comes back either way."""
    skip: list[str] = []
    tries: list[str] = []
    found: dict = {}
    for attempt in range(2):
        left = deadline - time.time()
        if left < 5:
            tries.append("no time left for a try")
            break
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            out, progress, err = (os.path.join(tmp, n) for n in ("out.json", "progress", "log"))
            cmd = [sys.executable, os.path.abspath(__file__), args.dir, "--worker", group,
                   "--worker-out", out, "--progress", progress, "--deadline", f"{deadline:.3f}",
                   "--driver", args.driver, "--rounds", str(args.rounds),
                   "--compile-budget", f"{compile_budget:.1f}"]
            cmd += ["--no-torch-compile"] if args.no_torch_compile else []
            for s in skip:
                cmd += ["--skip", s]
            with open(err, "w") as errf:
                # Its own session: a timeout kills the worker and whatever it started
                # (torch.compile's compile workers).
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=errf,
                                        stderr=subprocess.STDOUT, env=runtime_env(),
                                        start_new_session=True)
                try:
                    code = proc.wait(timeout=left + 10)
                except subprocess.TimeoutExpired:
                    code = "timeout"
                finally:
                    try:
                        os.killpg(proc.pid, 9)
                    except (ProcessLookupError, PermissionError):
                        pass
                    proc.wait()
            if os.path.exists(out):
                with open(out) as f:
                    partial = json.load(f)
                for key, record in partial.items():  # a retry's records replace the first's
                    if key.startswith("_") or key not in found or not found[key].get("ok") \
                            or record.get("ok"):
                        found[key] = record
                if partial.get("_complete"):
                    found["_tries"] = tries
                    return found
            with open(err, errors="replace") as f:
                tail = f.read()[-1500:].strip()
            begun = []
            if os.path.exists(progress):
                with open(progress) as f:
                    for line in f:
                        what, _, key = line.strip().partition(" ")
                        if what == "begin":
                            begun.append(key)
                        elif what == "end" and key in begun:
                            begun.remove(key)
            culprit = begun[-1] if begun else None
            how = "timed out" if code == "timeout" else f"exited {code}"
            tries.append(f"worker {how}{f' on {culprit}' if culprit else ''}: {tail[-500:]}")
            log(f"    {group}: worker {how}{f' on {culprit}' if culprit else ''}")
            if culprit and culprit in found:
                found[culprit].update(ok=False, error=f"the worker {how} on it")
            if culprit is None or culprit == "timing" or culprit in skip:
                break
            skip.append(culprit)
            deadline = min(last_deadline, time.time() + max(20.0, (deadline - time.time())))
    found["_error"] = " | ".join(t[:300] for t in tries)
    found["_tries"] = tries
    return found


def ms(seconds) -> str:
    return f"{seconds * 1e3:9.4f}" if isinstance(seconds, (int, float)) and seconds else f"{'-':>9}"


def ratio(a, b) -> str:
    return f"{a / b:7.2f}x" if a and b else f"{'-':>8}"


def summarize_model(m: dict, res: dict, margin: float, driver: str) -> dict:
    """The model's row: IREE's default, sft's model and verify choices, eager, torch.compile."""
    def seconds(key):
        r = res.get(key) or {}
        return r.get("median_s") if r.get("ok") else None

    def key(v):
        return item_key(v["file"], v.get("driver") or driver)

    by_name = {v["name"]: v for v in m["variants"]}
    row = {"model": m["name"], "variants": {}}
    for v in m["variants"]:
        r = res.get(key(v), {})
        row["variants"][v["name"]] = {"file": v["file"], "driver": v.get("driver") or driver,
                                      "ok": bool(r.get("ok")), "error": r.get("error"),
                                      "median_s": seconds(key(v)), "predicted_s": v.get("predicted_s"),
                                      "max_abs_err": r.get("max_abs_err"), "dispatches": v.get("dispatches"),
                                      "plan": v.get("plan")}
    row["iree_default_s"] = seconds(key(by_name["iree-default"])) if "iree-default" in by_name else None
    row["sft_model_s"] = seconds(key(by_name["sft-model"])) if "sft-model" in by_name else None
    timed = {v["name"]: seconds(key(v)) for v in m["variants"] if v.get("verify")}
    timed = {k: t for k, t in timed.items() if t}
    if timed:  # verify's rule: the fastest, unless it beats IREE's default by under the margin
        best = min(timed, key=timed.get)
        if "iree-default" in timed and timed[best] > timed["iree-default"] * (1 - margin):
            best = "iree-default"
        row["sft_verify"], row["sft_verify_s"] = best, timed[best]
    else:
        row["sft_verify"], row["sft_verify_s"] = None, None
    for key in ("eager", "torch_compile"):  # anchors: timed even where numerics differ
        row[f"{key}_s"] = (res.get(key) or {}).get("median_s")
        row[f"{key}_error"] = (res.get(key) or {}).get("error")
    row["predicted_model_s"] = by_name.get("sft-model", {}).get("predicted_s")
    row["predicted_default_s"] = by_name.get("iree-default", {}).get("predicted_s")
    row["failures"] = [f"{v}: {r['error']}" for v, r in row["variants"].items() if r["error"]] + [
        f"prepare {f['variant']}: {f['error']}" for f in m.get("failures", [])]
    row["worker_error"] = res.get("_error")
    return row


def table(manifest: dict, rows: list, kernel_rows: list, gemm: dict | None) -> str:
    lines = []
    head = (f"{'model':<18}{'iree-def':>9}{'sft-model':>10}{'sft-verify':>11}{'eager':>9}{'t.compile':>10}"
            f"{'model/iree':>11}{'verify/iree':>12}{'verify/torch':>13}{'pred model':>11}  verify's pick")
    lines += [f"per model, ms per call ({manifest['target']}, driver {manifest['run_driver']}); "
              "ratios are speed-ups (higher: sft faster)", head, "-" * len(head)]
    for r in rows:
        best_torch = min([t for t in (r["eager_s"], r["torch_compile_s"]) if t], default=None)
        lines.append(f"{r['model']:<18}{ms(r['iree_default_s'])}{ms(r['sft_model_s']):>10}"
                     f"{ms(r['sft_verify_s']):>11}{ms(r['eager_s'])}{ms(r['torch_compile_s']):>10}"
                     f"{ratio(r['iree_default_s'], r['sft_model_s']):>11}"
                     f"{ratio(r['iree_default_s'], r['sft_verify_s']):>12}"
                     f"{ratio(best_torch, r['sft_verify_s']):>13}{ms(r['predicted_model_s']):>11}"
                     f"  {r['sft_verify'] or '-'}")
    failed = [(r["model"], f) for r in rows for f in r["failures"]] + [
        (r["model"], f"worker: {r['worker_error'][:200]}") for r in rows if r["worker_error"]] + [
        (r["model"], f"{k}: {r[k + '_error']}") for r in rows for k in ("eager", "torch_compile")
        if r[k + "_error"]]
    if failed:
        lines.append("failures:")
        lines += [f"  {model}: {text[:240]}" for model, text in failed]
    if kernel_rows:
        head = (f"{'kernel':<16}{'domain':>16}{'roles':>6}{'cand':>6}{'rank':>5}{'pred us':>10}"
                f"{'meas us':>10}{'meas/pred':>10}  ok  config")
        lines += ["", "per kernel (alone): the cost model's prediction beside the measurement",
                  head, "-" * len(head)]
        for k in kernel_rows:
            pred, meas = k["predicted_s"], k["median_s"]
            lines.append(f"{k['kernel']:<16}{k['domain']:>16}{k['roles']:>6}{k['index']:>6}{k['rank']:>5}"
                         f"{pred * 1e6 if pred else float('nan'):>10.2f}"
                         f"{meas * 1e6 if meas else float('nan'):>10.2f}"
                         f"{(meas / pred) if meas and pred else float('nan'):>10.2f}"
                         f"  {'yes' if k['ok'] else 'NO '} {k['config'][:90]}"
                         + (f"  [{k['error'][:80]}]" if k.get("error") else ""))
    if gemm:
        peak = gemm.get("peak_flops")
        lines += ["", f"bf16 GEMM {gemm['n']}^3 (bf16 inputs, f32 accumulation), {gemm['flops'] / 1e9:.4g} "
                  f"GFLOP per call; peak {peak / 1e12:.0f} TFLOP/s dense by the datasheet" if peak else
                  f"bf16 GEMM {gemm['n']}^3 (bf16 inputs, f32 accumulation), {gemm['flops'] / 1e9:.4g} GFLOP per call"]
        head = f"  {'variant':<22}{'ms':>9}{'pred ms':>9}{'TFLOP/s':>10}{'% peak':>8}{'% torch':>9}  ok  config"
        lines += [head, "  " + "-" * (len(head) - 2)]
        for v in gemm["rows"]:
            tf = v.get("tflops")
            lines.append(f"  {v['name']:<22}{ms(v['median_s'])}{ms(v.get('predicted_s'))}"
                         + (f"{tf:10.4g}" if tf else f"{'failed':>10}")
                         + (f"{tf * 1e12 / peak * 100:8.1f}" if tf and peak else f"{'-':>8}")
                         # IREE's calls return when the work is done; a rate past the peak
                         # would say that they did not
                         + (" (over the peak: not synchronous?)" if tf and peak and tf * 1e12 > peak * 1.05 else "")
                         + (f"{v['of_torch'] * 100:9.1f}" if v.get("of_torch") else f"{'-':>9}")
                         + f"  {'yes' if v['ok'] else 'NO '} {v.get('config') or ''}"
                         + (f"  [{v['error'][:120]}]" if v.get("error") else ""))
        lines += [f"  {f['variant']}: {f['stage']} failed: {f['error'][:160]}" for f in gemm.get("failures", [])]
        lines += [f"  note: {n}" for n in gemm.get("notes", [])]
    return "\n".join(lines)


def environment(driver: str) -> dict:
    """Versions and the GPU, read without importing torch here (the workers do)."""
    from importlib import metadata

    env = {"python": sys.version.split()[0], "driver": driver, "cpus": os.cpu_count()}
    for name in ("iree-base-runtime", "torch", "numpy"):
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = None
    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        env["gpu"] = found.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        env["gpu"] = None
    return env


def warm_torch_compile(args, manifest: dict, start: float) -> None:
    """torch.compile of every model once, several at a time, before anything is timed:
    inductor's caches (on disk) then make each timing worker's own torch.compile quick. Worth
    it where there are cores to spare (the GPU machine has 16); nothing here is measured, and
    a failure here only means a cold compile later."""
    jobs = args.warm_jobs
    if jobs is None:
        jobs = 0 if args.driver.startswith("local") else max(0, min(8, (os.cpu_count() or 1) // 2))
    if jobs <= 0 or args.no_torch_compile or not manifest["models"]:
        return
    limit = min(args.compile_budget, args.budget / 3)
    log(f"[{time.time() - start:6.1f}s] warming torch.compile's caches: {len(manifest['models'])} "
        f"models, {jobs} at a time, at most {limit:.0f} s")
    env = runtime_env()
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")  # jobs x threads <= the cores
    pending, running, until = [m["name"] for m in manifest["models"]], [], time.time() + limit
    with tempfile.TemporaryDirectory(prefix="gpu-check-warm-") as tmp:
        while (pending or running) and time.time() < until:
            while pending and len(running) < jobs:
                name = pending.pop(0)
                cmd = [sys.executable, os.path.abspath(__file__), args.dir, "--worker", f"warm:{name}",
                       "--worker-out", os.path.join(tmp, f"{name}.json"), "--driver", args.driver,
                       "--deadline", f"{until:.3f}", "--compile-budget", "1"]
                running.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, env=env, start_new_session=True))
            time.sleep(0.2)
            running = [p for p in running if p.poll() is None]
        for proc in running:  # past the limit: the timing workers compile these cold
            try:
                os.killpg(proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    log(f"[{time.time() - start:6.1f}s] warmed ({len(pending) + len(running)} models not finished)")


def parent_main(args) -> int:
    start = time.time()
    deadline = start + args.budget
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    args.driver = args.driver or manifest["driver"]
    manifest["run_driver"] = args.driver
    try:
        ensure_iree(args.dir)
    except (SystemExit, subprocess.CalledProcessError, ImportError) as err:
        # Without a runtime nothing can run: say so in the result, as every other failure.
        path = args.out or os.path.join(args.dir, "result.json")
        with open(path, "w") as f:
            json.dump({"target": manifest["target"], "error": f"IREE runtime: {err}"}, f)
        log(f"gpu-check run: no IREE runtime ({err}); wrote {path}")
        return 1
    env = environment(args.driver)
    log(f"gpu-check run: {args.dir}, target {manifest['target']}, driver {args.driver}, "
        f"{env.get('gpu') or 'no GPU seen by nvidia-smi'}, budget {args.budget:.0f} s")
    if args.models:  # a subset (a second try of a few, say); the others are left out
        keep = set(args.models.split(","))
        manifest["models"] = [m for m in manifest["models"] if m["name"] in keep]
        manifest["kernels"] = [k for k in manifest["kernels"] if k["users"][0]["model"] in keep]
    if args.no_gemm:
        manifest["gemm"] = None
    if args.no_kernels:
        manifest["kernels"] = []
    warm_torch_compile(args, manifest, start)
    groups = (["gemm"] if manifest.get("gemm") else []) + [f"model:{m['name']}" for m in manifest["models"]]
    owners = {k["users"][0]["model"] for k in manifest["kernels"]}
    groups += [f"kernels:{m['name']}" for m in manifest["models"] if m["name"] in owners]
    results, compile_budget = {}, args.compile_budget
    for i, group in enumerate(groups):
        now = time.time()
        # What is left is shared by the groups still to run, by weight (a model's group loads
        # torch and compiles; a kernels' group only loads modules), with room to spare since
        # most finish early; each is capped.
        kind = group.partition(":")[0]
        weights = sum(GROUP_WEIGHTS[g.partition(":")[0]] for g in groups[i:])
        share = (deadline - now) * GROUP_WEIGHTS[kind] / weights * 3.0
        cap = GROUP_CAPS[kind]
        group_deadline = min(deadline, now + min(cap, max(share, GROUP_FLOORS[kind])))
        if deadline - now < 5:
            results[group] = {"_error": "skipped: the run's time budget is spent"}
            log(f"[{now - start:6.1f}s] {group}: skipped (budget)")
            continue
        results[group] = run_group(args, group, group_deadline, deadline, compile_budget)
        spent = (results[group].get("torch_compile") or {}).get("warmup_s") or 0.0
        compile_budget -= spent
        ok = sum(1 for k, r in results[group].items() if not k.startswith("_") and r.get("ok"))
        total = sum(1 for k in results[group] if not k.startswith("_"))
        log(f"[{time.time() - start:6.1f}s] {group}: {ok}/{total} ok"
            + (f"; {results[group]['_error'][:160]}" if results[group].get("_error") else ""))

    margin = manifest.get("verify_margin", MARGIN)
    rows = [summarize_model(m, results.get(f"model:{m['name']}", {}), margin, args.driver)
            for m in manifest["models"]]
    kernel_rows = []
    for k in manifest["kernels"]:
        res = results.get(f"kernels:{k['users'][0]['model']}", {})
        for c in k["candidates"]:
            r = res.get(item_key(c["file"], k["driver"] or args.driver), {}) if "file" in c \
                else {"error": c.get("error")}
            kernel_rows.append({"kernel": f"{k['users'][0]['model'][:10]}:{k['users'][0]['op']}",
                                "id": k["id"], "domain": "x".join(map(str, k["domain"])), "roles": k["roles"],
                                "index": c["index"], "rank": c["rank"], "predicted_s": c["predicted_s"],
                                "median_s": r.get("median_s"),
                                "ok": bool(r.get("ok")), "error": r.get("error") or res.get("_error"),
                                "config": c["config_text"], "users": k["users"],
                                "predicted_cores": k["predicted_cores"], "flops": k["flops"]})
    gemm = None
    if manifest.get("gemm"):
        g, res = manifest["gemm"], results.get("gemm", {})
        gemm = {k: g[k] for k in ("n", "flops", "peak_flops", "failures", "notes")}
        gemm["rows"] = []
        anchor = (res.get("torch_matmul") or {}).get("median_s")
        for v in g["variants"] + [{"name": "torch.matmul bf16", "file": None}]:
            key = item_key(v["file"], v.get("driver") or args.driver) if v["file"] else "torch_matmul"
            r = res.get(key, {})
            t = r.get("median_s")
            gemm["rows"].append({"name": v["name"], "median_s": t, "predicted_s": v.get("predicted_s"),
                                 "config": v.get("config_text"), "ok": bool(r.get("ok")),
                                 "error": r.get("error") or (res.get("_error") if not r else None),
                                 "tflops": g["flops"] / t / 1e12 if t else None,
                                 "of_torch": anchor / t if t and anchor else None})
    text = table(manifest, rows, kernel_rows, gemm)
    out = {"target": manifest["target"], "environment": env, "wall_s": time.time() - start,
           "rounds": args.rounds, "models": rows, "kernels": kernel_rows, "gemm": gemm,
           "prepare_failures": manifest.get("failures", []), "raw": results, "table": text}
    path = args.out or os.path.join(args.dir, "result.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    with open(os.path.splitext(path)[0] + ".txt", "w") as f:
        f.write(text + "\n")
    log("\n" + text)
    log(f"\nwrote {path} ({time.time() - start:.0f} s)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--out", help="result JSON (default DIR/result.json; a .txt table beside it)")
    parser.add_argument("--driver", help="IREE runtime driver (default: the manifest's)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=450.0, help="seconds the whole run may take")
    parser.add_argument("--compile-budget", type=float, default=240.0,
                        help="seconds of torch.compile warm-ups, all models together")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--models", help="comma-separated: run these models only")
    parser.add_argument("--no-gemm", action="store_true", help="leave the bf16 GEMM out")
    parser.add_argument("--no-kernels", action="store_true", help="leave the kernels alone out")
    parser.add_argument("--warm-jobs", type=int, default=None,
                        help="torch.compile warm-ups run side by side before timing (default: "
                        "half the cores, at most 8; none on local-* drivers)")
    # the worker side (internal)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--skip", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
