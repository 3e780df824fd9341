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
# This file is the command line and DIR as a whole; each manifest entry (a model, its kernels,
# the GEMM) is gpu_check_entries.py's.

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..backend.process import run_attached, run_group
from ..errors import SftError

RUN_SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "gpu_check_run.py"
MODELS_FILE = Path(__file__).resolve().parents[1] / "models.py"
WHEEL_SPEC = "iree-base-runtime==3.13.0"  # the runtime matching the compiler that built the .vmfb
WHEEL_PYTHON = "3.12"                     # the GPU machine's python3
WHEEL_GLOB = "iree_base_runtime-3.13.0-cp312-*.whl"
SIZE_LIMIT_MIB = 60                       # the device tool carries 64 MiB, the repository included

# |got - expected| <= atol * max(1, max|expected|) + rtol * |expected|, by the output's dtype.
TOLERANCES = {"float64": [1e-6, 1e-8], "float32": [1e-3, 1e-4], "float16": [2e-2, 2e-2],
              "bfloat16": [2e-2, 2e-2]}


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
        found = sorted(cache.glob(WHEEL_GLOB))
        if not found:
            progress(f"downloading {WHEEL_SPEC} for Python {WHEEL_PYTHON} into {cache}")
            cache.mkdir(parents=True, exist_ok=True)
            try:
                proc = run_group(
                    [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                     "--python-version", WHEEL_PYTHON, "--implementation", "cp",
                     "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                     "-d", str(cache), WHEEL_SPEC], timeout=600)
            except subprocess.TimeoutExpired:
                raise SftError(f"pip download {WHEEL_SPEC} timed out (pass --wheel PATH)") from None
            found = sorted(cache.glob(WHEEL_GLOB))
            if proc.returncode != 0 or not found:
                raise SftError(f"pip download {WHEEL_SPEC} failed: "
                               f"{(proc.stderr.strip().splitlines() or [''])[-1]} (pass --wheel PATH)")
        source = found[-1]
    for old in root.glob("*.whl"):  # one wheel: two would both be installed there
        if old.name != source.name:
            old.unlink()
    if not (root / source.name).exists():
        shutil.copyfile(source, root / source.name)
    return source.name


def size_mib(root: Path) -> float:
    """What DIR weighs, in MiB."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2 ** 20


def prepare_dir(root: Path, target_name: str, models: list[str], wheel: str | None = None,
                gemm: int | None = None, progress=print) -> dict:
    """Write DIR for `target_name`; returns the manifest (also DIR/manifest.json)."""
    from ..measure import MARGIN
    from ..targets import get_target
    from .gpu_check_entries import Store, gemm_entry, model_entry

    target = get_target(target_name)
    if gemm is None:  # IREE 3.13's SPIR-V cannot lower bf16 ('vector.bitcast' to bf16): none on Vulkan
        gemm = 0 if target.driver == "vulkan" else 256 if target.name == "host" else 4096
    root.mkdir(parents=True, exist_ok=True)
    for stale in ("modules", "models"):  # a previous prepare's files would travel for nothing
        shutil.rmtree(root / stale, ignore_errors=True)
    store = Store(root)
    start = time.perf_counter()
    progress(f"gpu-check prepare: target {target.name} (driver {target.driver}), {len(models)} "
             f"models, {f'bf16 GEMM {gemm}^3' if gemm else 'no GEMM'}")
    manifest = {"version": 1, "target": target.name, "driver": target.driver,
                "kernel_configs_searched": target.codegen is not None,
                "tolerances": TOLERANCES, "verify_margin": MARGIN, "models_py": "models.py",
                "models": [], "kernels": [], "gemm": None, "failures": []}
    shutil.copyfile(MODELS_FILE, root / "models.py")  # the torch anchors' definitions, no sft
    kernels: dict = {}

    def failed(name: str, err: Exception) -> None:
        # A model sft cannot compile for this target is recorded and left out, never fatal; so
        # is any other error (a search or codegen bug), named by its type.
        text = str(err) if isinstance(err, SftError) else f"{type(err).__name__}: {err}"
        manifest["failures"].append({"model": name, "error": text})
        progress(f"  {name}: FAILED: {text}")

    if gemm:
        try:
            manifest["gemm"] = gemm_entry(gemm, target, store, progress)
        except Exception as err:  # noqa: BLE001
            failed("gemm", err)
    for name in models:
        try:
            manifest["models"].append(model_entry(name, target, store, kernels, progress))
        except Exception as err:  # noqa: BLE001
            failed(name, err)
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


def _models_arg(text: str | None) -> list[str]:
    """--models as suite names (default: the whole benchmark suite)."""
    from ..models import BENCH_SUITE

    if not text:
        return list(BENCH_SUITE)
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
    return run_attached(cmd + extra)


def main(argv: list[str] | None = None) -> int:
    """The gpu-check command line."""
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
                       help="the bf16 GEMM's n (default 4096 on GPUs, 256 on the host, none on "
                       "Vulkan, whose SPIR-V IREE cannot lower bf16 for; 0: none)")
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
