"""tools/gpu-check on the CPU path: prepare host modules, run them with the standalone run script
(tools/gpu_check_run.py, which never imports sft) on local-task, torch's anchors on the CPU; and
the prepare phase for cuda:sm_90 (compile only: no GPU here), whose manifest and .vmfb files are
what travels to the GPU machine. No wheel is downloaded (`--wheel none`)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from sft.targets import get_target
from sft.tools import gpu_check

RUN_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_check_run.py"


def test_cpu_path(tmp_path):
    """`gpu-check all DIR --target host` on two small models, one round, then a run of the same
    DIR with a broken and a crashing module. One test, so that the prepare (the slow part) is
    done once however pytest-xdist distributes the tests."""
    root = tmp_path / "gpucheck"
    code = gpu_check.main(["all", str(root), "--target", "host", "--models", "linear,mlp",
                           "--gemm-size", "64", "--rounds", "1"])
    assert code == 0
    check_result(root, json.loads((root / "result.json").read_text()))
    check_manifest(root)
    check_failures_are_recorded(root, tmp_path)


def check_result(root, result):
    """Every variant ran, matched PyTorch eager and was timed; the tables are there."""
    assert result["target"] == "host" and result["environment"]["driver"] == "local-task"
    rows = {r["model"]: r for r in result["models"]}
    assert set(rows) == {"linear", "mlp"}
    for name, row in rows.items():
        # every module ran and matched PyTorch eager's outputs
        assert all(v["ok"] for v in row["variants"].values()), (name, row["variants"])
        for key in ("iree_default_s", "sft_model_s", "sft_verify_s", "eager_s", "torch_compile_s"):
            assert row[key] and row[key] > 0, (name, key, row)
        assert row["sft_verify"] in row["variants"] and row["predicted_model_s"] > 0
        assert not row["failures"] and not row["worker_error"]
    # per kernel: the cost model's prediction beside the measurement, IREE's default among them
    kernels = result["kernels"]
    assert {k["users"][0]["model"] for k in kernels} == {"linear", "mlp"}
    assert all(k["ok"] and k["median_s"] > 0 and k["predicted_s"] > 0 for k in kernels), kernels
    assert any(k["index"] == 0 for k in kernels) and any(k["index"] != 0 for k in kernels)
    gemm = {r["name"]: r for r in result["gemm"]["rows"]}
    assert {"iree-default", "sft-model", "torch.matmul bf16"} <= set(gemm)
    assert any(name.startswith("config #") for name in gemm)  # the host's searched configs
    assert all(r["ok"] and r["tflops"] > 0 for r in gemm.values()), gemm
    table = (root / "result.txt").read_text()
    assert "per model" in table and "per kernel" in table and "bf16 GEMM 64^3" in table


def check_manifest(root):
    """The model's state comes first, then its inputs; the expected output is eager's."""
    manifest = json.loads((root / "manifest.json").read_text())
    linear = next(m for m in manifest["models"] if m["name"] == "linear")
    assert [(a["name"], a["role"]) for a in linear["args"]] == [
        ("weight", "state"), ("bias", "state"), ("input0", "input")]
    data = np.load(root / linear["npz"])
    w, b, x = (data[a["key"]] for a in linear["args"])
    np.testing.assert_allclose(data["expected0"], x @ w.T + b, rtol=1e-5, atol=1e-5)
    roles = {v["role"] for v in linear["variants"]}
    assert {"iree-default", "sft-model", "verify-candidate"} <= roles
    by_role = {v["role"]: v for v in linear["variants"]}
    assert isinstance(by_role["iree-default"]["predicted_s"], float)
    assert isinstance(by_role["sft-model"]["predicted_s"], float)


def check_failures_are_recorded(root, tmp_path):
    """A module that does not load fails alone; a module that kills its worker (a segfaulting
    driver, played by the run script's testing hook) costs one retry without it. The others
    are checked and timed, and the run completes."""
    broken = tmp_path / "dir"
    shutil.copytree(root, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    mlp = next(m for m in manifest["models"] if m["name"] == "mlp")

    def alone(v):  # a variant whose module no other variant of the model runs
        return all((v["file"], v["driver"]) != (o["file"], o["driver"]) for o in mlp["variants"] if o is not v)

    victims = [v for v in mlp["variants"] if v["role"] == "verify-candidate" and alone(v)]
    assert len(victims) >= 2, mlp["variants"]
    garbage, crash = victims[:2]
    (broken / garbage["file"]).write_bytes(b"not a module")
    env = {**os.environ, "SFT_GPU_CHECK_CRASH": f"{crash['file']}@{crash['driver'] or manifest['driver']}"}
    proc = subprocess.run([sys.executable, str(RUN_SCRIPT), str(broken), "--rounds", "1", "--models", "mlp",
                           "--no-gemm", "--no-kernels", "--no-torch-compile", "--out", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text())["models"]
    variants = row["variants"]
    assert not variants[garbage["name"]]["ok"] and variants[garbage["name"]]["error"]
    assert not variants[crash["name"]]["ok"] and "crashed" in variants[crash["name"]]["error"]
    assert variants["iree-default"]["ok"] and row["iree_default_s"] > 0 and row["eager_s"] > 0
    assert "exited -11" in proc.stdout  # the parent said what happened


def test_prepare_for_sm90(tmp_path):
    """Compile only: the .vmfb files exist and carry Hopper PTX (`.target sm_90`)."""
    root = tmp_path / "gpucheck"
    assert gpu_check.main(["prepare", str(root), "--target", "cuda:sm_90", "--models", "linear",
                           "--wheel", "none", "--gemm-size", "256"]) == 0
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["target"] == "cuda:sm_90" and manifest["driver"] == "cuda"
    assert manifest["wheel"] is None and (root / "models.py").is_file()
    (linear,) = manifest["models"]
    assert linear["entry"] == "main" and [a["role"] for a in linear["args"]] == ["state", "state", "input"]
    assert linear["outputs"][0]["shape"] == [8, 128]
    names = {v["name"] for v in linear["variants"]}
    assert {"iree-default", "sft-model"} <= names
    assert all(isinstance(v["predicted_s"], float) for v in linear["variants"] if v["role"] != "verify-candidate")
    files = {v["file"] for v in linear["variants"]} | {v["file"] for v in manifest["gemm"]["variants"]}
    files |= {c["file"] for k in manifest["kernels"] for c in k["candidates"] if "file" in c}
    for file in files:
        assert b".target sm_90" in (root / file).read_bytes(), file
    peak = get_target("cuda:sm_90").codegen.gpu.mma_peak("bf16")
    assert manifest["gemm"]["n"] == 256 and manifest["gemm"]["peak_flops"] == peak
    if manifest["kernel_configs_searched"]:  # once the CUDA codegen is searched: its configs
        assert manifest["kernels"] and all(k["candidates"] for k in manifest["kernels"])
    assert gpu_check.size_mib(root) < 5


def test_lavapipe_path(tmp_path):
    """`gpu-check all DIR --target vulkan:lavapipe`: the code a lent GPU machine runs (prepare
    here, the standalone run script on IREE's vulkan driver; only the driver name differs), on
    Mesa's software Vulkan device. Every variant and every kernel config ran and matched eager;
    no GEMM (IREE's SPIR-V has no bf16). Fails, never skips, without lavapipe."""
    root = tmp_path / "gpucheck-lavapipe"
    code = gpu_check.main(["all", str(root), "--target", "vulkan:lavapipe", "--models", "linear,mlp",
                           "--rounds", "1", "--no-torch-compile"])
    assert code == 0
    result = json.loads((root / "result.json").read_text())
    assert result["target"] == "vulkan:lavapipe" and result["environment"]["driver"] == "vulkan"
    rows = {r["model"]: r for r in result["models"]}
    assert set(rows) == {"linear", "mlp"}
    for name, row in rows.items():
        assert all(v["ok"] for v in row["variants"].values()), (name, row["variants"])
        assert row["iree_default_s"] > 0 and row["sft_model_s"] > 0 and not row["worker_error"]
    kernels = result["kernels"]
    assert kernels and all(k["ok"] and k["median_s"] > 0 for k in kernels), kernels
    assert any(k["index"] != 0 for k in kernels)  # the SPIR-V space's configs ran, not only IREE's
    assert result["gemm"] is None or not result["gemm"].get("rows")
