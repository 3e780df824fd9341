"""The parent: the groups run one after another, each in a worker process of its own, within
the run's time budget; then the result (JSON and table) written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from . import report
from .common import ENTRY, ensure_iree, log, read_manifest, runtime_env

GROUP_CAPS = {"gemm": 90.0, "model": 120.0, "kernels": 60.0}  # seconds a group may take at most
GROUP_WEIGHTS = {"gemm": 2.0, "model": 3.0, "kernels": 1.0}  # its share of the time left
GROUP_FLOORS = {"gemm": 30.0, "model": 30.0, "kernels": 15.0}  # ... but at least this


def worker_cmd(args, group: str, out: str, deadline: float, compile_budget: float,
               progress: str | None = None, skip=()) -> list[str]:
    cmd = [sys.executable, ENTRY, args.dir, "--worker", group, "--worker-out", out,
           "--deadline", f"{deadline:.3f}", "--driver", args.driver, "--rounds", str(args.rounds),
           "--compile-budget", f"{compile_budget:.1f}"]
    cmd += ["--progress", progress] if progress else []
    cmd += ["--no-torch-compile"] if args.no_torch_compile else []
    for s in skip:
        cmd += ["--skip", s]
    return cmd


def start_worker(cmd: list[str], output, env: dict) -> subprocess.Popen:
    """A worker in a session of its own: killing its group kills whatever it started too
    (torch.compile's compile workers)."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def culprit(progress: str) -> str | None:
    """The last step a worker began and did not end (by its progress file), if any."""
    begun = []
    if os.path.exists(progress):
        with open(progress) as f:
            for line in f:
                what, _, key = line.strip().partition(" ")
                if what == "begin":
                    begun.append(key)
                elif what == "end" and key in begun:
                    begun.remove(key)
    return begun[-1] if begun else None


def run_group(args, group: str, deadline: float, last_deadline: float, compile_budget: float) -> dict:
    """One group in a worker process (killed past `deadline`). A worker that crashes or hangs
    is tried once more, until `last_deadline` at the latest, without the module (or torch
    variant) it was on; what it had found before comes back either way."""
    skip: list[str] = []
    tries: list[str] = []
    found: dict = {}
    for _ in range(2):
        left = deadline - time.time()
        if left < 5:
            tries.append("no time left for a try")
            break
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            out, progress, err = (os.path.join(tmp, n) for n in ("out.json", "progress", "log"))
            with open(err, "w") as errf:
                proc = start_worker(worker_cmd(args, group, out, deadline, compile_budget, progress, skip),
                                    errf, runtime_env())
                try:
                    code = proc.wait(timeout=left + 10)
                except subprocess.TimeoutExpired:
                    code = "timeout"
                finally:
                    kill_group(proc)
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
            on = culprit(progress)
            how = "timed out" if code == "timeout" else f"exited {code}"
            tries.append(f"worker {how}{f' on {on}' if on else ''}: {tail[-500:]}")
            log(f"    {group}: worker {how}{f' on {on}' if on else ''}")
            if on and on in found:
                found[on].update(ok=False, error=f"the worker {how} on it")
            if on is None or on == "timing" or on in skip:
                break
            skip.append(on)
            deadline = min(last_deadline, time.time() + max(20.0, (deadline - time.time())))
    found["_error"] = " | ".join(t[:300] for t in tries)
    found["_tries"] = tries
    return found


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
                cmd = worker_cmd(args, f"warm:{name}", os.path.join(tmp, f"{name}.json"), until, 1.0)
                running.append(start_worker(cmd, subprocess.DEVNULL, env))
            time.sleep(0.2)
            running = [p for p in running if p.poll() is None]
        for proc in running:  # past the limit: the timing workers compile these cold
            kill_group(proc)
    log(f"[{time.time() - start:6.1f}s] warmed ({len(pending) + len(running)} models not finished)")


def groups_of(manifest: dict) -> list[str]:
    """The groups, in the order they run: the GEMM, the models, then their kernels."""
    groups = (["gemm"] if manifest.get("gemm") else []) + [f"model:{m['name']}" for m in manifest["models"]]
    owners = {k["users"][0]["model"] for k in manifest["kernels"]}
    return groups + [f"kernels:{m['name']}" for m in manifest["models"] if m["name"] in owners]


def run_groups(args, groups: list[str], start: float, deadline: float) -> dict:
    """Every group's results (group -> item key -> record), each group within its share of the
    time left."""
    results, compile_budget = {}, args.compile_budget
    for i, group in enumerate(groups):
        now = time.time()
        # What is left is shared by the groups still to run, by weight (a model's group loads
        # torch and compiles; a kernels' group only loads modules), with room to spare since
        # most finish early; each is capped.
        kind = group.partition(":")[0]
        weights = sum(GROUP_WEIGHTS[g.partition(":")[0]] for g in groups[i:])
        share = (deadline - now) * GROUP_WEIGHTS[kind] / weights * 3.0
        group_deadline = min(deadline, now + min(GROUP_CAPS[kind], max(share, GROUP_FLOORS[kind])))
        if deadline - now < 5:
            results[group] = {"_error": "skipped: the run's time budget is spent"}
            log(f"[{now - start:6.1f}s] {group}: skipped (budget)")
            continue
        found = results[group] = run_group(args, group, group_deadline, deadline, compile_budget)
        compile_budget -= (found.get("torch_compile") or {}).get("warmup_s") or 0.0
        records = [r for k, r in found.items() if not k.startswith("_")]
        log(f"[{time.time() - start:6.1f}s] {group}: {sum(1 for r in records if r.get('ok'))}/{len(records)} ok"
            + (f"; {found['_error'][:160]}" if found.get("_error") else ""))
    return results


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


def parent_main(args) -> int:
    """The whole run: DIR's groups within --budget, then DIR/result.json and its table."""
    start = time.time()
    manifest = read_manifest(args.dir)
    args.driver = args.driver or manifest["driver"]
    manifest["run_driver"] = args.driver
    path = args.out or os.path.join(args.dir, "result.json")
    try:
        ensure_iree(args.dir)
    except (SystemExit, subprocess.CalledProcessError, ImportError) as err:
        # Without a runtime nothing can run: say so in the result, as every other failure.
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
    results = run_groups(args, groups_of(manifest), start, start + args.budget)

    rows, kernel_rows, gemm = report.summarize(manifest, results, args.driver)
    text = report.table(manifest, rows, kernel_rows, gemm)
    out = {"target": manifest["target"], "environment": env, "wall_s": time.time() - start,
           "rounds": args.rounds, "models": rows, "kernels": kernel_rows, "gemm": gemm,
           "prepare_failures": manifest.get("failures", []), "raw": results, "table": text}
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    with open(os.path.splitext(path)[0] + ".txt", "w") as f:
        f.write(text + "\n")
    log("\n" + text)
    log(f"\nwrote {path} ({time.time() - start:.0f} s)")
    return 0
