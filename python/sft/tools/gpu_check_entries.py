"""gpu-check prepare, per manifest entry: what one suite model, its contraction kernels and the
bf16 GEMM compile to, and what the run needs to check and time them (tools/gpu_check.py writes
the manifest from these entries)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ..backend import compile_module, profile
from ..errors import SftError
from ..measure import _TYPES, kernel_inputs, kernel_program
from ..models import BENCH_SUITE
from ..plan import Plan
from ..program import lower, prepare
from ..search.candidates import plan_of, program_candidates
from ..search.exhaustive import rank_tiles
from ..search.compile import compile_program
from ..search.strategy import search_plan
from ..space.kernels import Kernel
from ..values import NP_TYPES, to_numpy

TOP_K = 3  # as sft's verify: configs per kernel
# Config fields as the run's table shows them.
_SHORT = {"distribution": "dist", "vector_common_parallel": "vec", "vector_reduction": "red",
          "workgroup": "wg", "reduction": "red", "subgroup": "sub", "workgroup_size": "wgsize",
          "promote_operands": "promote", "prefetch_stages": "stages", "subgroup_size": "sgsize"}


class Store:
    """DIR: .vmfb files stored by content (variants that compile to the same module share one,
    and the run times it once), plus the model's arrays."""

    def __init__(self, root: Path):
        self.root = root
        (root / "modules").mkdir(parents=True, exist_ok=True)
        (root / "models").mkdir(exist_ok=True)

    def module(self, vmfb: bytes) -> str:
        """DIR's file of a compiled module, written once."""
        name = f"modules/{hashlib.sha256(vmfb).hexdigest()[:16]}.vmfb"
        if not (self.root / name).exists():
            (self.root / name).write_bytes(vmfb)
        return name

    def arrays(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        """DIR's .npz of a model's arrays; bf16 as its bits, since np.load cannot rebuild
        ml_dtypes' type without pickle."""
        rel = f"models/{name}.npz"
        np.savez_compressed(self.root / rel, **{
            k: v.view(np.uint16) if v.dtype.name == "bfloat16" else np.ascontiguousarray(v)
            for k, v in arrays.items()})
        return rel


def _array_entry(key: str, a: np.ndarray, **extra) -> dict:
    return {"key": key, "shape": list(a.shape), "dtype": a.dtype.name, **extra}


def _config_json(config):
    """A kernel config (a TileConfig or GpuConfig) as data; None for IREE's own."""
    return None if config is None else config.to_dict()


def _config_text(config) -> str:
    """A config in one short line for the run's table: its fields, lists as 8x16x0, empty ones
    left out ("wg=64x128x0 red=0x0x8 ...")."""
    if config is None:
        return "IREE's default"
    parts = []
    for key, value in dataclasses.asdict(config).items():
        if value in ((), [], "", 0, None) or (key == "pipeline" and value == "DoubleTilingExpert"):
            continue
        shown = "x".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        parts.append(shown if key in ("pipeline", "mma_kind") else f"{_SHORT.get(key, key)}={shown}")
    return " ".join(parts)


def _plan_json(plan) -> dict:
    return json.loads(plan.to_json())


def _compile_all(jobs: dict, target) -> dict:
    """name -> the Artifact of compiling (text, flags), or the SftError's text: iree-compile
    runs in processes of its own, so compiles overlap."""
    def one(item):
        name, (text, flags) = item
        try:
            return name, compile_module(text, target, flags)
        except SftError as err:
            return name, str(err)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return dict(pool.map(one, jobs.items()))


# --------------------------------------------------------------------------- the cost model

def _with_picks(option, picks) -> float:
    """An option set's predicted seconds with its kernels' own best predictions replaced by
    `picks` (one per kernel)."""
    return option.predicted - sum(c.predicted[0] for c in option.kernels) + sum(picks)


def default_prediction(report):
    """Predicted seconds of IREE's default plan: the default option set with every kernel at
    its default config (the search's own ranking holds the default options with the model's
    tiles). None where the search ranked no default option set."""
    o = next((o for o in report.ranked if o.options.is_default), None)
    return None if o is None else _with_picks(o, [c.default_prediction() for c in o.kernels])


def best_tiled(report):
    """The best ranked option set that keeps tile configs and has kernels (None: none does)."""
    return next((o for o in report.ranked if o.options.keeps_tiles and o.kernels), None)


def verify_candidates(report) -> list[tuple[str, Plan, float | None]]:
    """(name, plan, predicted seconds) of the whole-program plans sft's verify times
    (`search.candidates.program_candidates`), with the model's own tile picks where verify would
    use the measured ones (measured only on the device, later), and, for the best option set
    that keeps tiles, every kernel at its 2nd and 3rd predicted config (a stand-in for verify's
    per-kernel picks). Identical plans once."""
    def rank(c, r):
        return c.ranked[min(r, len(c.ranked) - 1)]

    def tiles(option, r=0):
        return tuple((c.kernel.op_id, c.space.config(rank(c, r))) for c in option.kernels if rank(c, r) != 0)

    tiled = best_tiled(report)
    predicted = {o.options.describe(): o.predicted for o in report.ranked}
    predicted["iree-default"] = default_prediction(report)
    found = [(name, plan, predicted.get(name))
             for name, plan in program_candidates(report, tiles(tiled) if tiled else ()).items()]
    if tiled is not None:
        for r in (1, 2):
            picks = [c.predicted[min(r, len(c.predicted) - 1)] for c in tiled.kernels]
            found.append((f"{tiled.options.describe()} tiles #{r + 1}",
                          plan_of(report, tiled.options, tiles(tiled, r)), _with_picks(tiled, picks)))
    unique = {}
    for name, plan, seconds in found:
        unique.setdefault(plan, (name, plan, seconds))
    return list(unique.values())


# -------------------------------------------------------------------------------- kernels

def _einsum(kernel) -> str:
    """The kernel as an einsum ("ac,cb->ab"): the run checks each config against it."""
    terms = ["".join("abcdefghijklmnopqrstuvwxyz"[int(d)] for d in re.findall(r"d(\d+)", m.split("->")[1]))
             for m in kernel.maps]
    return f"{terms[0]},{terms[1]}->{terms[2]}"


def kernel_entries(tiled, target, store: Store, seen: dict, model: str, progress) -> list[str]:
    """The kernels of one model's best tiled option set (as verify measures them): per kernel
    its top-k predicted configs and IREE's own (index 0), each compiled as the kernel alone.
    Kernels already prepared (same computation, any model) are shared. Returns their ids."""
    ids = []
    # The kernel is timed on the driver its predictions were made for: one core under a serial
    # option set (local-sync), all of them otherwise (the target's driver).
    driver = tiled.options.driver
    cores = 1 if driver else target.desc.cores
    for choice in tiled.kernels:
        kernel = choice.kernel
        kid = "k" + kernel.key()[:12] + ("s" if cores == 1 else "")
        ids.append(kid)
        user = {"model": model, "op": kernel.op_id}
        if kid in seen:
            seen[kid]["users"].append(user)
            continue
        predicted = dict(zip(choice.ranked, choice.predicted))
        configs = {i: choice.space.config(i) for i in dict.fromkeys([*choice.ranked[:TOP_K], 0])}
        built = _compile_all({i: (kernel_program(kernel, c), ()) for i, c in configs.items()}, target)
        candidates = []
        for i, config in configs.items():
            entry = {"index": i, "rank": choice.ranked.index(i) + 1, "config": _config_json(config),
                     "config_text": _config_text(config), "predicted_s": predicted[i]}
            if isinstance(built[i], str):
                entry["error"] = f"compile: {built[i]}"
            else:
                entry["file"] = store.module(built[i].vmfb)
            candidates.append(entry)
        seen[kid] = {
            "id": kid, "users": [user],
            "domain": list(kernel.domain), "roles": "".join(kernel.roles), "maps": list(kernel.maps),
            "einsum": _einsum(kernel), "dtype": np.dtype(NP_TYPES[_TYPES[kernel.element_bytes]]).name,
            "input_shapes": [[int(x) for x in s.split("x")[:-1]] for s in kernel_inputs(kernel)],
            "seed": zlib.crc32(kid.encode()) & 0xFFFF, "entry": "main", "driver": driver,
            "predicted_cores": cores, "flops": 2 * int(np.prod(kernel.domain)),
            "candidates": candidates,
        }
        progress(f"    kernel {kid} {'x'.join(map(str, kernel.domain))} ({''.join(kernel.roles)}): "
                 f"{sum('file' in c for c in candidates)}/{len(candidates)} configs compiled")
    return ids


# --------------------------------------------------------------------------------- models

def _arrays(program, inputs, expected) -> tuple[dict, list, list, list]:
    """(arrays for the npz, argument entries: the model's state first, output entries, notes)."""
    values = [(key, "state", v) for key, v in program.state.items()]
    values += [(f"input{j}", "input", to_numpy(x)) for j, x in enumerate(inputs)]
    arrays, args = {}, []
    for i, (name, role, value) in enumerate(values):
        arrays[f"arg{i}"] = value
        args.append(_array_entry(f"arg{i}", value, name=name, role=role))
    # The compiled function's flat results that are model outputs, in order, against the
    # tensors the model returned (other kinds: state or inputs updated in place, not checked).
    leaves = [to_numpy(t) for t in torch.utils._pytree.tree_leaves(expected)
              if isinstance(t, torch.Tensor)]
    results = program.signature.results
    positions = [i for i, r in enumerate(results) if r.kind == "output"] if results else range(len(leaves))
    if len(positions) != len(leaves):
        return arrays, args, [], [f"{len(leaves)} tensors returned, {len(positions)} output results: "
                                  "not checked"]
    outputs = []
    for k, (pos, leaf) in enumerate(zip(positions, leaves)):
        arrays[f"expected{k}"] = leaf
        outputs.append(_array_entry(f"expected{k}", leaf, result=pos))
    return arrays, args, outputs, []


def model_entry(name: str, target, store: Store, kernels: dict, progress) -> dict:
    """Everything the run needs for one suite model."""
    start = time.perf_counter()
    case = BENCH_SUITE[name]
    seed = zlib.crc32(name.encode()) & 0xFFFF
    model = case.build()
    torch.manual_seed(seed)  # the case's inputs draw from torch's generator
    inputs = case.inputs()
    with torch.no_grad():  # PyTorch eager on this CPU: what every variant must compute
        expected = model(*inputs)
    program, module = prepare(model, inputs)
    arrays, args, outputs, notes = _arrays(program, inputs, expected)
    entry = {"name": name, "entry": program.entry, "npz": store.arrays(name, arrays), "args": args,
             "outputs": outputs, "seed": seed, "variants": [], "failures": [], "notes": notes}

    # IREE's default: sft's import and lowering with the empty plan, IREE decides everything.
    plan0, _, _, _, default_artifact = compile_program(program, module, target, search="none")
    # The search itself, not the tuning database's replay: the run needs the whole report.
    plan, report = search_plan(program.sft_text, target)
    searched = report.to_dict()
    entry["search"] = {k: searched[k] for k in ("chosen", "summary", "space_size_log10", "options", "expand")}
    entry["search"]["orders"] = [list(map(str, o)) for o in report.orders]

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
            text = program.linalg if plan_.as_imported else lower(program.module(), plan_, target)[1]
            jobs[key] = (text, plan_.iree_flags)
        except SftError as err:  # a plan that does not apply (IllegalPlan)
            built[key] = f"lower: {err}"
    built.update(_compile_all(jobs, target))

    def variant(vname, role, plan_, predicted, verify):
        artifact = built[module_key(plan_)]
        record = {"name": vname, "role": role, "verify": verify, "plan": _plan_json(plan_),
                  "predicted_s": predicted, "driver": plan_.driver}
        if isinstance(artifact, str):
            if role != "sft-model":
                entry["failures"].append({"variant": vname, "stage": "compile", "error": artifact})
                return
            # sft.compile falls back to IREE's choice: so does the run
            artifact, record["fallback"] = default_artifact, artifact
            record.update(plan=_plan_json(plan0), driver="")
        record.update(file=store.module(artifact.vmfb), dispatches=artifact.dispatch_count)
        entry["variants"].append(record)

    variant("iree-default", "iree-default", plan0, default_prediction(report), True)
    variant("sft-model", "sft-model", plan, report.ranked[0].predicted if report.ranked else None, False)
    for vname, plan_, predicted in candidates[1:]:
        variant(vname, "verify-candidate", plan_, predicted, True)

    if not target.model_times:
        # sft's own plans keep IREE's configs here; the kernels are still measured against the
        # space's configs, the model's ranking only picking which (its timings mean nothing)
        entry["notes"].append(f"{target.name}: kernel configs ranked by a model without timings "
                              "for this device: measured, never chosen by sft")
        report = search_plan(program.sft_text, dataclasses.replace(target, model_times=True))[1]
    tiled = best_tiled(report)
    entry["kernels"] = kernel_entries(tiled, target, store, kernels, name, progress) if tiled else []
    entry["prepare_s"] = time.perf_counter() - start
    progress(f"  {name}: {len(entry['variants'])} variants ({len({v['file'] for v in entry['variants']})} "
             f"modules), {len(entry['kernels'])} kernels, {len(entry['failures'])} failed, "
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
    # The dense bf16 peak of the target's GPU description (None off a GPU, or without bf16).
    gpu = getattr(target.codegen, "gpu", None)
    peak = gpu.mma_peak("bf16") if gpu is not None else 0.0
    entry = {"n": n, "dtype": "bfloat16", "accumulate": "float32", "entry": "main",
             "seed": 4096, "flops": 2 * n ** 3, "peak_flops": peak or None,
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
                                  "driver": plan.driver, "file": store.module(artifact.vmfb),
                                  "predicted_s": report.ranked[0].predicted if report.ranked else None})
    except SftError as err:
        entry["failures"].append({"variant": "sft-model", "stage": "compile", "error": str(err)})
    if target.codegen is None:
        entry["notes"].append(f"{target.name}: kernel configs not searched; IREE's own only")
        progress(f"  gemm {n}^3 bf16: {len(entry['variants'])} variants (no searched configs)")
        return entry
    # The target's space and model on the GEMM stated as a kernel of sft's (bf16 inputs, an
    # f32 result, so that a GPU's space offers its bf16 intrinsics): its top configs, imposed
    # on the matmul.
    kernel = Kernel(0, (n, n, n), ("m", "n", "k"), 4,
                    ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
                    input_type="bf16")
    try:
        dispatch = profile(gemm_text(n), target).contraction((n, n, n))
        space = target.codegen.space(kernel)
        choice = rank_tiles(kernel, space, target, target.desc.cores,
                            target.codegen.default(kernel, dispatch), TOP_K)
    except (SftError, ValueError, KeyError, TypeError, IndexError) as err:
        entry["failures"].append({"variant": "searched configs", "stage": "search", "error": str(err)})
        return entry
    entry["variants"][0]["predicted_s"] = choice.default_prediction()
    picks = [(rank, i) for rank, i in enumerate(choice.ranked[:TOP_K], 1) if i != 0]
    built = _compile_all({i: (gemm_text(n, space.config(i)), ()) for _, i in picks}, target)
    for rank, i in picks:
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
