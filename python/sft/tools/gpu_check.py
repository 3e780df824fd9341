"""tools/gpu-check: sft against IREE's defaults and PyTorch on a machine with a GPU, in two
phases, because IREE's compiler (84 MB) does not travel to the GPU machine and its runtime
(15 MB) does.

  gpu-check prepare DIR [--target cuda:sm_90] [--models a,b] [--wheel PATH|none]
      here, with sft: compile every variant to a .vmfb, write the inputs and PyTorch eager's
      expected outputs (.npz), a manifest.json, the model definitions and the runtime wheel
  gpu-check run DIR [--out RESULT.json] [...]
      the standalone tools/gpu_check_run.py (no sft import: it needs numpy, iree.runtime, torch)
  gpu-check all DIR --target host
      both, on this machine (the CPU path, which the tests run)

What is compiled per model, for the target: IREE's default (search="none"); sft's
search="model" plan; the whole-program candidates sft's verify would time (IREE's default, the
best plan under each of the top option sets, the program as written when a graph rewrite was
chosen, and the model's second and third tile picks for every kernel at once); and per
contraction kernel its top predicted configs and IREE's own, each imposed on the kernel alone
(`measure.kernel_program`), as verify times them. Plus a bf16 GEMM (bf16 inputs, f32
accumulation, written by hand) under IREE's default and the configs the target's cost model
ranks best. The manifest carries what the run needs and what it compares against: entry
function, argument order (the model's state first), predicted seconds and configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import SftError

RUN_SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "gpu_check_run.py"
MODELS_FILE = Path(__file__).resolve().parents[1] / "models.py"
WHEEL_SPEC = "iree-base-runtime==3.13.0"  # the runtime matching the compiler that built the .vmfb
WHEEL_PYTHON = "3.12"                     # the GPU machine's python3
TOP_OPTIONS, TOP_K = 4, 3                 # as sft's verify: option sets and configs per kernel
SIZE_LIMIT_MIB = 60                       # the device tool carries 64 MiB, the repository included

# |got - expected| <= atol * max(1, max|expected|) + rtol * |expected|, by the output's dtype.
TOLERANCES = {"float64": [1e-6, 1e-8], "float32": [1e-3, 1e-4], "float16": [2e-2, 2e-2],
              "bfloat16": [2e-2, 2e-2]}
# The bf16 GEMM's peak rate, dense, by the vendors' datasheets (H100/H200 SXM, A100 SXM).
PEAK_BF16 = {"cuda:sm_90": 989e12, "cuda:sm_80": 312e12, "rocm:gfx942": 1307e12}


# ---------------------------------------------------------------------------------- writing

def _dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name


def _storable(a: np.ndarray) -> np.ndarray:
    """bf16 as its bits: np.load cannot rebuild ml_dtypes' type without pickle."""
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else np.ascontiguousarray(a)


def _array_entry(key: str, a: np.ndarray, **extra) -> dict:
    return {"key": key, "shape": list(a.shape), "dtype": _dtype_name(a), **extra}


class Store:
    """DIR: .vmfb files stored by content (variants that compile to the same module share one,
    and the run times it once), plus the model's arrays."""

    def __init__(self, root: Path):
        self.root = root
        (root / "modules").mkdir(parents=True, exist_ok=True)
        (root / "models").mkdir(exist_ok=True)

    def module(self, vmfb: bytes) -> str:
        name = f"modules/{hashlib.sha256(vmfb).hexdigest()[:16]}.vmfb"
        path = self.root / name
        if not path.exists():
            path.write_bytes(vmfb)
        return name

    def arrays(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        rel = f"models/{name}.npz"
        np.savez_compressed(self.root / rel, **{k: _storable(v) for k, v in arrays.items()})
        return rel


def _config_json(config):
    """A kernel config as data: GpuConfig.to_dict, a dataclass's fields, None for IREE's own."""
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return repr(config)


def _config_text(config) -> str:
    """A config in one short line for the run's table: its fields, lists as 8x16x0, empty ones
    left out ("wg=64x128x0 red=0x0x8 ...")."""
    if config is None:
        return "IREE's default"
    data = _config_json(config)
    if not isinstance(data, dict):
        return str(data)
    short = {"distribution": "dist", "vector_common_parallel": "vec", "vector_reduction": "red",
             "workgroup": "wg", "reduction": "red", "subgroup": "sub", "workgroup_size": "wgsize",
             "promote_operands": "promote", "prefetch_stages": "stages", "subgroup_size": "sgsize"}
    parts = []
    for key, value in data.items():
        if value in ((), [], "", 0, None) or (key == "pipeline" and value == "DoubleTilingExpert"):
            continue
        shown = "x".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        parts.append(shown if key in ("pipeline", "mma_kind") else f"{short.get(key, key)}={shown}")
    return " ".join(parts)


def _plan_json(plan) -> dict:
    return json.loads(plan.to_json())


def _compile_all(jobs: dict, compile_one) -> dict:
    """name -> compile_one(*args), or the SftError's text: iree-compile runs in processes of its
    own, so compiles overlap."""
    def one(item):
        name, args = item
        try:
            return name, compile_one(*args)
        except SftError as err:
            return name, f"{err}"

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return dict(pool.map(one, jobs.items()))


# --------------------------------------------------------------------------- the cost model

def default_prediction(report):
    """Predicted seconds of IREE's default plan: the default option set with every kernel at
    its default config (the search's own ranking holds the default options with the model's
    tiles). None where the search ranked no default option set."""
    from ..space.options import ModuleOptions

    o = next((o for o in report.ranked if o.options == ModuleOptions()), None)
    if o is None:
        return None
    return o.predicted - sum(c.predicted[0] for c in o.kernels) + sum(
        c.default_prediction() for c in o.kernels)


def _rank_prediction(option, rank: int) -> float:
    """An option set's predicted seconds with every kernel at its rank-th predicted config."""
    pick = [c.predicted[min(rank, len(c.predicted) - 1)] for c in option.kernels]
    return option.predicted - sum(c.predicted[0] for c in option.kernels) + sum(pick)


def verify_candidates(report) -> list[tuple[str, object, float | None]]:
    """(name, plan, predicted seconds) of the whole-program plans sft's verify would time
    (`measure.verify`), with the model's own tile picks where verify would use the measured
    ones (measured only on the device, later): IREE's default, the best plan under each of the
    top option sets, the best options on the program as written when a graph rewrite was
    chosen, and, for the best option set that keeps tiles, every kernel at its 2nd and 3rd
    predicted config (a stand-in for verify's per-kernel picks). Identical plans once."""
    from ..plan import Plan

    found = [("iree-default", Plan(), default_prediction(report))]

    def tiles_of(option, rank=0):
        if not option.options.keeps_tiles:
            return ()
        picks = [(c.kernel.op_id, c.ranked[min(rank, len(c.ranked) - 1)]) for c in option.kernels]
        by_op = {c.kernel.op_id: c for c in option.kernels}
        return tuple((op, by_op[op].space.config(i)) for op, i in picks if i != 0)

    for option in report.ranked[:TOP_OPTIONS]:
        o = option.options
        found.append((o.describe(), Plan(report.expand, report.orders, tiles=tiles_of(option),
                                         flags=o.flags, driver=o.driver), option.predicted))
    if report.ranked and (report.orders or report.expand):
        o = report.ranked[0].options
        found.append((f"{o.describe()} as written", Plan(flags=o.flags, driver=o.driver), None))
    tiled = next((o for o in report.ranked if o.options.keeps_tiles and o.kernels), None)
    if tiled is not None:
        o = tiled.options
        for rank in (1, 2):
            found.append((f"{o.describe()} tiles #{rank + 1}",
                          Plan(report.expand, report.orders, tiles=tiles_of(tiled, rank),
                               flags=o.flags, driver=o.driver), _rank_prediction(tiled, rank)))
    unique, seen = [], set()
    for name, plan, predicted in found:
        if plan not in seen:
            seen.add(plan)
            unique.append((name, plan, predicted))
    return unique


# -------------------------------------------------------------------------------- kernels

def _einsum(kernel) -> str:
    """The kernel as an einsum ("ac,cb->ab"): the run checks each config against it."""
    import re

    letters = "abcdefghijklmnopqrstuvwxyz"
    terms = []
    for text in kernel.maps:
        dims = re.findall(r"d(\d+)", text.split("->")[1])
        terms.append("".join(letters[int(d)] for d in dims))
    return f"{terms[0]},{terms[1]}->{terms[2]}"


def kernel_entries(tiled, target, store: Store, seen: dict, model: str, progress) -> list[str]:
    """The kernels of one model's best tiled option set (as verify measures them): per kernel
    its top-k predicted configs and IREE's own (index 0), each compiled as the kernel alone.
    Kernels already prepared (same computation, any model) are shared. Returns their ids."""
    from ..backend import compile_module
    from ..measure import _TYPES, kernel_inputs, kernel_program

    ids = []
    # The kernel is timed on the driver its predictions were made for: one core under a serial
    # option set (local-sync), all of them otherwise (the target's driver).
    driver, cores = ("local-sync", 1) if tiled.options.serial else ("", target.desc.cores)
    for choice in tiled.kernels:
        kernel = choice.kernel
        kid = "k" + kernel.key()[:12] + ("s" if cores == 1 else "")
        ids.append(kid)
        if kid in seen:
            seen[kid]["users"].append({"model": model, "op": kernel.op_id})
            continue
        predicted = dict(zip(choice.ranked, choice.predicted))
        indices = list(dict.fromkeys([*choice.ranked[:TOP_K], 0]))
        configs = {i: choice.space.config(i) for i in indices}
        built = _compile_all({i: (kernel_program(kernel, configs[i]),) for i in indices},
                             lambda text: compile_module(text, target))
        candidates = []
        for i in indices:
            entry = {"index": i, "rank": choice.ranked.index(i) + 1, "config": _config_json(configs[i]),
                     "config_text": _config_text(configs[i]),
                     "predicted_s": predicted[i]}
            if isinstance(built[i], str):
                entry["error"] = f"compile: {built[i]}"
            else:
                entry["file"] = store.module(built[i].vmfb)
            candidates.append(entry)
        seen[kid] = {
            "id": kid, "users": [{"model": model, "op": kernel.op_id}],
            "domain": list(kernel.domain), "roles": "".join(kernel.roles), "maps": list(kernel.maps),
            "einsum": _einsum(kernel), "dtype": {"f16": "float16", "f32": "float32",
                                                 "f64": "float64"}[_TYPES[kernel.element_bytes]],
            "input_shapes": [[int(x) for x in s.split("x")[:-1]] for s in kernel_inputs(kernel)],
            "seed": zlib.crc32(kid.encode()) & 0xFFFF, "entry": "main", "driver": driver,
            "predicted_cores": cores, "flops": 2 * int(np.prod(kernel.domain)),
            "candidates": candidates,
        }
        progress(f"    kernel {kid} {'x'.join(map(str, kernel.domain))} ({''.join(kernel.roles)}): "
                 f"{sum('file' in c for c in candidates)}/{len(candidates)} configs compiled")
    return ids


# --------------------------------------------------------------------------------- models

def model_entry(name: str, target, store: Store, kernels: dict, progress) -> dict:
    """Everything the run needs for one suite model."""
    import torch

    from ..api import compile_program, search_plan
    from ..backend import compile_module
    from ..models import BENCH_SUITE
    from ..program import lower, prepare
    from ..values import to_numpy

    start = time.perf_counter()
    case = BENCH_SUITE[name]
    seed = zlib.crc32(name.encode()) & 0xFFFF
    model = case.build()
    torch.manual_seed(seed)  # the case's inputs draw from torch's generator
    inputs = case.inputs()
    with torch.no_grad():  # PyTorch eager on this CPU: what every variant must compute
        expected = model(*inputs)
    program, module = prepare(model, inputs)

    arrays, args = {}, []
    for i, (key, value) in enumerate(program.state.items()):
        arrays[f"arg{i}"] = value
        args.append(_array_entry(f"arg{i}", value, name=key, role="state"))
    for j, x in enumerate(inputs):
        i = len(args)
        arrays[f"arg{i}"] = to_numpy(x)
        args.append(_array_entry(f"arg{i}", arrays[f"arg{i}"], name=f"input{j}", role="input"))
    # The compiled function's flat results that are model outputs, in order, against the
    # tensors the model returned (other kinds: state or inputs updated in place, not checked).
    results = program.signature.results
    positions = [i for i, r in enumerate(results) if r.kind == "output"] if results else None
    leaves = [to_numpy(t) for t in torch.utils._pytree.tree_leaves(expected)
              if isinstance(t, torch.Tensor)]
    positions = list(range(len(leaves))) if positions is None else positions
    outputs, notes = [], []
    if len(positions) == len(leaves):
        for k, (pos, leaf) in enumerate(zip(positions, leaves)):
            arrays[f"expected{k}"] = leaf
            outputs.append(_array_entry(f"expected{k}", leaf, result=pos))
    else:
        notes.append(f"{len(leaves)} tensors returned, {len(positions)} output results: not checked")

    entry = {"name": name, "entry": program.entry, "npz": store.arrays(name, arrays), "args": args,
             "outputs": outputs, "seed": seed, "variants": [], "failures": [], "notes": notes}

    # IREE's default: sft's import and lowering with the empty plan, IREE decides everything.
    plan0, _, _, _, default_artifact = compile_program(program, module, target, search="none")
    # The search itself, not the tuning database's replay: the run needs the whole report.
    plan, report = search_plan(program.sft_text, target)
    entry["search"] = {"chosen": report.chosen, "summary": report.summary(),
                       "space_size_log10": report.space_size_log10,
                       "options": [{"options": o.options.describe(), "predicted_s": o.predicted}
                                   for o in report.ranked],
                       "expand": list(report.expand), "orders": [list(map(str, o)) for o in report.orders]}

    candidates = verify_candidates(report)
    # One module per distinct program and flags (the driver is the run's choice, not the
    # module's): iree-compile's output carries its input's path, so the same plan compiled
    # twice would give two files. Lowering runs the MLIR bindings, one plan at a time;
    # iree-compile runs side by side.
    def module_key(plan_):
        return dataclasses.replace(plan_, driver="")

    jobs, built = {}, {module_key(plan0): default_artifact}
    for plan_ in [plan] + [p for _, p, _ in candidates]:
        key = module_key(plan_)
        if key in built or key in jobs:
            continue
        try:
            jobs[key] = (lower(program.module(), plan_)[1], plan_.flags)
        except SftError as err:  # a plan that does not apply (IllegalPlan)
            built[key] = f"lower: {err}"
    built.update(_compile_all(jobs, lambda text, flags: compile_module(text, target, flags)))

    def variant(vname, role, plan_, predicted, verify):
        artifact = built[module_key(plan_)]
        record = {"name": vname, "role": role, "verify": verify, "plan": _plan_json(plan_),
                  "predicted_s": predicted, "driver": plan_.driver}
        if isinstance(artifact, str):
            if role == "sft-model":  # sft.compile falls back to IREE's choice: so does the run
                artifact, record["fallback"] = default_artifact, artifact
                record.update(plan=_plan_json(plan0), driver="")
            else:
                entry["failures"].append({"variant": vname, "stage": "compile", "error": artifact})
                return
        record.update(file=store.module(artifact.vmfb), dispatches=artifact.dispatch_count)
        entry["variants"].append(record)

    best = report.ranked[0].predicted if report.ranked else None
    variant("iree-default", "iree-default", plan0, default_prediction(report), True)
    variant("sft-model", "sft-model", plan, best, False)
    for vname, plan_, predicted in candidates[1:]:
        variant(vname, "verify-candidate", plan_, predicted, True)

    tiled = next((o for o in report.ranked if o.options.keeps_tiles and o.kernels), None)
    entry["kernels"] = kernel_entries(tiled, target, store, kernels, name, progress) if tiled else []
    entry["prepare_s"] = time.perf_counter() - start
    files = len({v["file"] for v in entry["variants"]})
    progress(f"  {name}: {len(entry['variants'])} variants ({files} modules), "
             f"{len(entry['kernels'])} kernels, {len(entry['failures'])} failed, "
             f"{entry['prepare_s']:.1f} s")
    return entry


# ----------------------------------------------------------------------------------- GEMM

def gemm_text(n: int, config=None) -> str:
    """C[n, n] (f32) = A[n, n] @ B[n, n] with bf16 inputs, accumulated in f32, `config` (a
    kernel config) imposed on the matmul when given."""
    a, c = f"tensor<{n}x{n}xbf16>", f"tensor<{n}x{n}xf32>"
    attrs = f" {{compilation_info = {config.attribute()}}}" if config is not None else ""
    return f"""func.func @main(%a: {a}, %b: {a}) -> {c} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {c}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {c}) -> {c}
  %r = linalg.matmul{attrs} ins(%a, %b : {a}, {a}) outs(%init : {c}) -> {c}
  return %r : {c}
}}
"""


def gemm_entry(n: int, target, store: Store, progress) -> dict:
    """The bf16 GEMM: IREE's default, sft's search="model" plan, and the configs the target's
    cost model ranks best for it (none where the target's kernel configs are not searched)."""
    from ..api import compile_program, search_plan
    from ..backend import compile_module, profile
    from ..program import prepare
    from ..search.exhaustive import rank_tiles
    from ..space.kernels import Kernel

    entry = {"n": n, "dtype": "bfloat16", "accumulate": "float32", "entry": "main",
             "seed": 4096, "flops": 2 * n ** 3, "peak_flops": PEAK_BF16.get(target.name),
             "variants": [], "failures": [], "notes": []}
    default = compile_module(gemm_text(n), target)
    entry["variants"].append({"name": "iree-default", "role": "iree-default", "config": None,
                              "config_text": "IREE's default", "file": store.module(default.vmfb),
                              "predicted_s": None})
    # sft.compile's path: the mixed-precision matmul raises to an sft.reduce (its body extends
    # bf16 to f32), which the kernel search does not tile; the plan is options only.
    program, module = prepare(gemm_text(n))
    plan, report = search_plan(program.sft_text, target)
    try:
        artifact = compile_program(program, module, target, plan=plan)[4]
        entry["variants"].append({"name": "sft-model", "role": "sft-model", "plan": _plan_json(plan),
                                  "config_text": f"plan: {report.chosen or 'default options'}",
                                  "driver": plan.driver,
                                  "file": store.module(artifact.vmfb),
                                  "predicted_s": report.ranked[0].predicted if report.ranked else None})
    except SftError as err:
        entry["failures"].append({"variant": "sft-model", "stage": "compile", "error": str(err)})
    if target.codegen is None:
        entry["notes"].append(f"{target.name}: kernel configs not searched; IREE's own only")
        progress(f"  gemm {n}^3 bf16: {len(entry['variants'])} variants (no searched configs)")
        return entry
    # The target's space and model on the GEMM stated as a kernel of sft's (an f32 result):
    # its top configs, imposed on the matmul.
    kernel = Kernel(0, (n, n, n), ("m", "n", "k"), 4,
                    ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"))
    try:
        dispatch = profile(gemm_text(n), target).contraction((n, n, n))
        space = target.codegen.space(kernel)
        choice = rank_tiles(kernel, space, target, target.desc.cores,
                            target.codegen.default(kernel, dispatch), TOP_K)
    except (SftError, ValueError, KeyError, TypeError, IndexError) as err:
        entry["failures"].append({"variant": "searched configs", "stage": "search", "error": str(err)})
        return entry
    entry["variants"][0]["predicted_s"] = choice.default_prediction()
    picks = [i for i in choice.ranked[:TOP_K] if i != 0]
    built = _compile_all({i: (gemm_text(n, space.config(i)),) for i in picks},
                         lambda text: compile_module(text, target))
    for rank, i in enumerate(choice.ranked[:TOP_K], 1):
        if i == 0:
            continue
        config = space.config(i)
        record = {"name": f"config #{rank}", "role": "searched-config", "index": i,
                  "config": _config_json(config), "config_text": _config_text(config),
                  "predicted_s": choice.predicted[rank - 1]}
        if isinstance(built[i], str):
            entry["failures"].append({"variant": record["name"], "stage": "compile", "error": built[i]})
            continue
        record["file"] = store.module(built[i].vmfb)
        entry["variants"].append(record)
    progress(f"  gemm {n}^3 bf16: {len(entry['variants'])} variants, {len(entry['failures'])} failed")
    return entry


# ---------------------------------------------------------------------------------- wheel

def runtime_wheel(root: Path, wheel: str | None, progress) -> str | None:
    """The IREE runtime wheel for the GPU machine's Python in DIR: `wheel` copied when it is a
    path, none when it is "none", else downloaded once into the cache and copied from there."""
    from ..paths import cache_dir

    if wheel == "none":
        return None
    if wheel:
        source = Path(wheel)
        if not source.is_file():
            raise SftError(f"--wheel {wheel}: no such file")
    else:
        cache = cache_dir() / "wheels"
        found = sorted(cache.glob("iree_base_runtime-3.13.0-cp312-*.whl"))
        if not found:
            progress(f"downloading {WHEEL_SPEC} for Python {WHEEL_PYTHON} into {cache}")
            cache.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--python-version", WHEEL_PYTHON, "--implementation", "cp",
                 "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                 "-d", str(cache), WHEEL_SPEC], capture_output=True, text=True)
            found = sorted(cache.glob("iree_base_runtime-3.13.0-cp312-*.whl"))
            if proc.returncode != 0 or not found:
                raise SftError(f"pip download {WHEEL_SPEC} failed: "
                               f"{(proc.stderr.strip().splitlines() or [''])[-1]} (pass --wheel PATH)")
        source = found[-1]
    for old in root.glob("*.whl"):  # one wheel: two would both be installed there
        if old.name != source.name:
            old.unlink()
    target = root / source.name
    if not target.exists():
        shutil.copyfile(source, target)
    return source.name


# ------------------------------------------------------------------------------- prepare

def _error_text(err: Exception) -> str:
    return str(err) if isinstance(err, SftError) else f"{type(err).__name__}: {err}"


def size_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2 ** 20


def prepare_dir(root: Path, target_name: str, models: list[str], wheel: str | None = None,
                gemm: int | None = None, progress=print) -> dict:
    """Write DIR for `target_name`; returns the manifest (also DIR/manifest.json)."""
    from ..targets import get_target

    target = get_target(target_name)
    gemm = (256 if target.name == "host" else 4096) if gemm is None else gemm
    root.mkdir(parents=True, exist_ok=True)
    for stale in ("modules", "models"):  # a previous prepare's files would travel for nothing
        shutil.rmtree(root / stale, ignore_errors=True)
    store = Store(root)
    start = time.perf_counter()
    progress(f"gpu-check prepare: target {target.name} (driver {target.driver}), {len(models)} "
             f"models, {f'bf16 GEMM {gemm}^3' if gemm else 'no GEMM'}")
    manifest = {"version": 1, "target": target.name, "driver": target.driver,
                "kernel_configs_searched": target.codegen is not None,
                "tolerances": TOLERANCES, "verify_margin": 0.03, "models_py": "models.py",
                "models": [], "kernels": [], "gemm": None, "failures": []}
    shutil.copyfile(MODELS_FILE, root / "models.py")  # the torch anchors' definitions, no sft
    kernels: dict = {}
    # A model sft cannot compile for this target is recorded and left out, never fatal; so is
    # any other error (a search or codegen bug), named by its type.
    if gemm:
        try:
            manifest["gemm"] = gemm_entry(gemm, target, store, progress)
        except Exception as err:  # noqa: BLE001
            manifest["failures"].append({"model": "gemm", "error": _error_text(err)})
            progress(f"  gemm: FAILED: {_error_text(err)}")
    for name in models:
        try:
            manifest["models"].append(model_entry(name, target, store, kernels, progress))
        except Exception as err:  # noqa: BLE001
            manifest["failures"].append({"model": name, "error": _error_text(err)})
            progress(f"  {name}: FAILED: {_error_text(err)}")
            (root / "models" / f"{name}.npz").unlink(missing_ok=True)  # nothing uses it now
    manifest["kernels"] = list(kernels.values())
    manifest["wheel"] = runtime_wheel(root, wheel, progress)
    manifest["prepare_s"] = time.perf_counter() - start
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))
    manifest["size_mib"] = size_mib(root)
    progress(f"wrote {root}: {len(manifest['models'])} models, {len(manifest['kernels'])} kernels, "
             f"{len(list((root / 'modules').glob('*.vmfb')))} modules, {manifest['size_mib']:.1f} MiB, "
             f"{manifest['prepare_s']:.0f} s")
    if manifest["size_mib"] > SIZE_LIMIT_MIB:
        progress(f"warning: {root} is {manifest['size_mib']:.1f} MiB, over {SIZE_LIMIT_MIB} MiB: "
                 "it will not travel with the repository (fewer --models)")
    return manifest


def default_models() -> list[str]:
    from ..models import BENCH_SUITE

    return list(BENCH_SUITE)


def _models_arg(text: str | None) -> list[str]:
    from ..models import BENCH_SUITE

    if not text:
        return default_models()
    names = [n for part in text.split(",") for n in part.split() if n]
    unknown = [n for n in names if n not in BENCH_SUITE]
    if unknown:
        raise SftError(f"unknown model {unknown[0]!r} (known: {', '.join(BENCH_SUITE)})")
    return names


def run_phase(root: Path, out: Path | None, driver: str | None, rounds: int | None,
              extra: list[str]) -> int:
    """tools/gpu_check_run.py with this Python (the run phase, on this machine)."""
    cmd = [sys.executable, str(RUN_SCRIPT), str(root)]
    cmd += ["--out", str(out)] if out else []
    cmd += ["--driver", driver] if driver else []
    cmd += ["--rounds", str(rounds)] if rounds else []
    return subprocess.call(cmd + extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "all"):
        p = sub.add_parser(name, help="compile every variant into DIR" if name == "prepare"
                           else "prepare, then run here")
        p.add_argument("dir", type=Path)
        p.add_argument("--target", default="cuda:sm_90" if name == "prepare" else "host")
        p.add_argument("--models", help="comma-separated suite models (default: the benchmark suite)")
        p.add_argument("--wheel", help="the iree-base-runtime cp312 wheel to put in DIR; 'none' for "
                       "no wheel (default: downloaded once, then cached)")
        p.add_argument("--gemm-size", type=int, default=None,
                       help="the bf16 GEMM's n (default 4096 on GPUs, 256 on the host; 0: none)")
    run = sub.add_parser("run", help="tools/gpu_check_run.py DIR with this Python")
    run.add_argument("dir", type=Path)
    for p in (sub.choices["all"], run):
        p.add_argument("--out", type=Path, help="result JSON (default DIR/result.json)")
        p.add_argument("--driver", help="IREE driver (default: the manifest's)")
        p.add_argument("--rounds", type=int, help="timing rounds (default 7)")
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "run":
            return run_phase(args.dir, args.out, args.driver, args.rounds, extra)
        if extra and args.command == "prepare":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        # `all` runs here, where the runtime is installed: no wheel unless one is named.
        prepare_dir(args.dir, args.target, _models_arg(args.models),
                    "none" if args.command == "all" and not args.wheel else args.wheel,
                    args.gemm_size, progress=lambda line: print(line, flush=True))
        if args.command == "all":  # the run's own options (--budget, --no-torch-compile) pass on
            return run_phase(args.dir, args.out, args.driver, args.rounds, extra)
        return 0
    except SftError as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
