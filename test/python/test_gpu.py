"""The GPU decision space, IREE's constraint check and the GPU cost model (compile only: no GPU
is needed or assumed). Every sampled candidate compiles to a .vmfb for its target and passes
IREE's own constraint check; the cost model's hand-computed cases hold."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sft.backend.constraints import check_config, split_config, verify_config
from sft.backend.iree import _iree_compile
from sft.backend.process import run_group
from sft.backend.profile import Profile, parse_profile
from sft.cost.gpu import occupancy, predict
from sft.decisions.gpu_tiles import (COOP_MATRIX, FIELDS, INTRINSICS, SPIRV_SIMT, TF_MMA, TF_SIMT,
                                     VECTOR_DISTRIBUTE, GpuConfig, config_of_row, intrinsic,
                                     row_of_iree)
from sft.measure import kernel_program
from sft.search.exhaustive import low_precision_twin
from sft.space.gpu import gpu_space, legal, shared_bytes
from sft.space.kernels import Kernel
from sft.targets import get_target
from sft.targets.cuda import SM80, SM90
from sft.targets.rocm import GFX942
from sft.targets.vulkan import RDNA3
from sft.tools.gpu_check_entries import gemm_text

# How to build for each target (flags, and the #hal.device.target the module carries where
# IREE 3.13 has no flag): production's own Target objects.
TARGETS = {name: get_target(name) for name in ("cuda:sm_80", "cuda:sm_90", "rocm:gfx942", "vulkan:rdna3")}

MM = ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)")
LINEAR = ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)")
BMM = ("(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
       "(d0, d1, d2, d3) -> (d0, d1, d2)")
SHAPES = {  # (domain, roles, maps)
    "square": ((256, 256, 256), ("m", "n", "k"), MM),
    "linear": ((128, 256, 512), ("m", "n", "k"), LINEAR),  # B contiguous along k, as nn.Linear
    "batched": ((4, 128, 128, 128), ("b", "m", "n", "k"), BMM),
}
SAMPLE = 10


def kernel(shape: str, element_bytes: int) -> Kernel:
    domain, roles, maps = SHAPES[shape]
    return Kernel(0, domain, roles, element_bytes, maps)


def module_text(text: str, target: str) -> str:
    return TARGETS[target].module_text(text)


def compile_error(text: str, target: str, extra: tuple[str, ...] = ()) -> str | None:
    """None when iree-compile builds a .vmfb of `text` for the target, else its first error."""
    with tempfile.TemporaryDirectory(prefix="sft-gpu-test-") as tmp:
        src, out = Path(tmp) / "in.mlir", Path(tmp) / "out.vmfb"
        src.write_text(module_text(text, target))
        proc = run_group([_iree_compile(), str(src), "-o", str(out), *TARGETS[target].flags, *extra], 300)
        if proc.returncode == 0 and out.exists() and out.stat().st_size > 0:
            return None
        return next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr[-300:])


def sample(space, gpu, seed: int) -> list[int]:
    """A seeded sample of candidate indices, and the predicted best."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(np.arange(1, len(space)), size=min(SAMPLE, len(space) - 1), replace=False)
    best = int(np.argmin(predict(space.kernel, space.candidates, gpu)[1:])) + 1
    return sorted({*map(int, picks), best})


def unbatched(k: Kernel) -> Kernel:
    """One batch slice of a batched kernel (IREE's constraint emission crashes on batched
    contractions with an intrinsic, so the slice's constraints are checked)."""
    keep = [i for i, r in enumerate(k.roles) if r != "b"]
    rename = {f"d{i}": f"d{j}" for j, i in enumerate(keep)}

    def fix(text):
        dims, result = text.split("->")
        out = [d.strip() for d in result.strip(" ()").split(",") if d.strip() in rename]
        return f"({', '.join(rename[f'd{i}'] for i in keep)}) -> ({', '.join(rename[d] for d in out)})"
    return Kernel(k.op_id, tuple(k.domain[i] for i in keep), tuple(k.roles[i] for i in keep),
                  k.element_bytes, tuple(fix(m) for m in k.maps))


@pytest.mark.parametrize("element_bytes", [2, 4], ids=["f16", "f32"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("target", list(TARGETS))
def test_sampled_candidates_compile_and_pass_iree_constraints(target, shape, element_bytes):
    gpu, k = TARGETS[target].codegen.gpu, kernel(shape, element_bytes)
    space = gpu_space(k, gpu)
    assert not space.candidates[0].any() and space.config(0) is None  # row 0: IREE's default
    assert 100 <= len(space) <= 5000
    assert legal(k, space.candidates, gpu).all()
    flags = TARGETS[target].flags
    checked = k if "b" not in k.roles else unbatched(k)

    def run(index):
        row = space.candidates[index]
        error = compile_error(kernel_program(k, space.config(index)), target)
        program = module_text(kernel_program(checked, config_of_row(checked, row)), target)
        return row, error, verify_config(program, flags)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(run, sample(space, gpu, seed=len(target) * 31 + element_bytes)))
    failures = [(list(row), error, v.violations) for row, error, v in results if error or v.violations]
    assert not failures, f"{target} {shape} f{8 * element_bytes}: {failures}"
    # IREE really checked every config on an intrinsic of TileAndFuse and VectorDistribute.
    assert all(v.checked for row, _, v in results if row[0] in (TF_MMA, VECTOR_DISTRIBUTE))


def test_constraint_check_reports_iree_violations():
    k = kernel("square", 2)
    good = config_of_row(k, [TF_MMA, INTRINSICS.index("NV_MMA_SYNC_F16_16x8x16_F16") + 1,
                          64, 64, 128, 32, 32, 32, 2, 1])
    flags = TARGETS["cuda:sm_80"].flags
    assert verify_config(kernel_program(k, good), flags).checked
    assert check_config(kernel_program(k, good), flags) == []
    bad = dataclasses.replace(good, workgroup=(48, 64, 0))
    violated = check_config(kernel_program(k, bad), flags)
    assert "dim_0 must be divisible by wg_0 (256 % 48 == 0)" in violated
    staged = dataclasses.replace(good, prefetch_stages=3)
    assert any("prefetch_num_stages == 2" in v for v in check_config(kernel_program(k, staged), flags))
    # Nothing to check for a SPIR-V pipeline: no constraints are emitted.
    rdna = gpu_space(k, RDNA3)
    verdict = verify_config(kernel_program(k, rdna.config(1)), TARGETS["vulkan:rdna3"].flags)
    assert not verdict.checked and verdict.violations == ()


def test_split_config_restores_the_plain_program():
    k = kernel("square", 4)
    config = gpu_space(k, SM80).config(1)
    program, lowering, translation = split_config(kernel_program(k, config))
    assert program == kernel_program(k, None)
    assert lowering == config.lowering_config() and translation == config.translation_info()


def _iree_default(target: str, k: Kernel):
    """The Dispatch IREE configures for the kernel by itself."""
    with tempfile.TemporaryDirectory(prefix="sft-gpu-test-") as tmp:
        src, out = Path(tmp) / "in.mlir", Path(tmp) / "out.mlir"
        src.write_text(module_text(kernel_program(k, None), target))
        proc = run_group([_iree_compile(), str(src), "-o", str(out), *TARGETS[target].flags,
                          "--compile-to=executable-configurations"], 300)
        assert proc.returncode == 0, proc.stderr[-500:]
        return parse_profile(out.read_text()).dispatches[0]


@pytest.mark.parametrize("target, element_bytes, expected", [
    ("cuda:sm_80", 2, [TF_MMA, INTRINSICS.index("NV_MMA_SYNC_F16_16x8x16_F16") + 1,
                       64, 64, 128, 32, 32, 32, 2, 1]),
    ("cuda:sm_90", 4, [TF_SIMT, 0, 32, 128, 32, 1, 16, 32, 0, 0]),
    ("rocm:gfx942", 2, [VECTOR_DISTRIBUTE, INTRINSICS.index("MFMA_F32_16x16x16_F16") + 1,
                        64, 64, 128, 32, 32, 64, 0, 1]),
    ("rocm:gfx942", 4, [TF_MMA, INTRINSICS.index("MFMA_F32_16x16x4_F32") + 1,
                        64, 128, 64, 32, 64, 64, 2, 1]),
    ("vulkan:rdna3", 2, [COOP_MATRIX, INTRINSICS.index("WMMAR3_F16_16x16x16_F16") + 1,
                         64, 128, 32, 32, 64, 32, 1, 1]),
    ("vulkan:rdna3", 4, [SPIRV_SIMT, 0, 64, 64, 16, 8, 4, 0, 2, 1]),
])
def test_profile_records_iree_gpu_config_as_a_row(target, element_bytes, expected):
    k = kernel("square", element_bytes)
    dispatch = _iree_default(target, k)
    assert dispatch.maps == MM and dispatch.gpu["pipeline"] in (
        "TileAndFuse", "VectorDistribute", "CooperativeMatrixVectorize", "MatmulPromoteVectorize")
    json.dumps(dispatch.gpu)  # JSON-able
    assert list(row_of_iree(k, dispatch.gpu)) == expected
    profile = Profile((dispatch,), 1)
    assert Profile.from_json(profile.to_json()) == profile
    # The row replays IREE's own choice; imposed, it compiles (but for IREE's VectorDistribute
    # f16 config on gfx942, which fails imposed: "'func.func' op failed to distribute").
    replay = config_of_row(k, row_of_iree(k, dispatch.gpu))
    assert replay.pipeline == dispatch.gpu["pipeline"]
    assert math.prod(replay.workgroup_size) == math.prod(dispatch.gpu["workgroup_size"])
    if expected[0] != VECTOR_DISTRIBUTE:
        assert compile_error(kernel_program(k, replay), target) is None


def test_profile_without_gpu_key_still_loads():
    old = json.dumps({"dispatch_count": 1, "dispatches": [
        {"index": 0, "name": "matmul_8x8x8_f32", "dims": [8, 8, 8], "bytes": 768, "config": None,
         "maps": []}]})
    assert Profile.from_json(old).dispatches[0].gpu is None


# ---- the cost model, by hand ---------------------------------------------------------------

def _mma_row(gpu, name, wg_m, wg_n, k, sub_m, sub_n):
    return np.array([[TF_MMA, INTRINSICS.index(name) + 1, wg_m, wg_n, k, sub_m, sub_n,
                      gpu.subgroup_size, 2, 1]])


def test_one_workgroup_runs_at_one_sm_share_of_peak():
    k = Kernel(0, (128, 256, 8192), ("m", "n", "k"), 2, MM)
    row = _mma_row(SM90, "NV_MMA_SYNC_F16_16x8x16_F16", 128, 256, 64, 64, 64)  # 8 subgroups
    assert legal(k, row, SM90).all()
    flops = 2.0 * 128 * 256 * 8192
    # each subgroup's 64x64 tile is 4x8 intrinsics of 16x8: 12 fragment loads for 32 MMAs
    one_sm = SM90.mma_peak("f16") * SM90.mma_efficiency / SM90.compute_units / (1 + 12 / 32)
    seconds = predict(k, row, SM90)[0] - SM90.launch_overhead
    assert flops / one_sm <= seconds <= 1.1 * flops / one_sm


def test_squarer_subgroup_tiles_load_fewer_fragments():
    """Measured on an H200 (bf16 4096^3, IREE's mma.sync code, workgroup 128x256): 2x16
    intrinsics per subgroup 1.47 ms, 4x8 1.14, 8x4 1.18 (docs/results.md, 2026-12-04)."""
    k = Kernel(0, (4096, 4096, 4096), ("m", "n", "k"), 4, MM, input_type="bf16")
    name = "NV_MMA_SYNC_F32_16x8x16_BF16"
    rows = np.concatenate([_mma_row(SM90, name, 128, 256, 32, sub_m, sub_n)
                           for sub_m, sub_n in ((32, 128), (64, 64), (128, 32))])
    assert legal(k, rows, SM90).all()
    flat, square, tall = predict(k, rows, SM90)
    assert square <= tall < flat


def test_compute_bound_gemm_predicts_close_to_peak():
    k = Kernel(0, (4096, 4096, 4096), ("m", "n", "k"), 2, MM)  # bf16: same dense peak as f16
    space = gpu_space(k, SM90)
    best = predict(k, space.candidates, SM90).min()
    # at peak but for the fragment loads of 4x8 intrinsics per subgroup (12 per 32 MMAs)
    ideal = 2.0 * 4096 ** 3 / (SM90.mma_peak("bf16") * SM90.mma_efficiency) * (1 + 12 / 32)
    assert 0.9 * ideal <= best <= 1.2 * ideal


def test_workgroup_memory_beyond_the_limit_is_illegal():
    k = Kernel(0, (256, 256, 256), ("m", "n", "k"), 4, MM)
    fits = _mma_row(GFX942, "MFMA_F32_16x16x4_F32", 128, 128, 64, 32, 64)   # exactly 64 KiB
    over = _mma_row(GFX942, "MFMA_F32_16x16x4_F32", 128, 128, 128, 32, 64)  # 128 KiB
    assert legal(k, np.concatenate([fits, over]), GFX942).tolist() == [True, False]


def test_occupancy_halves_when_workgroup_memory_doubles_past_half_the_cu():
    k = Kernel(0, (4096, 4096, 4096), ("m", "n", "k"), 2, MM)
    name = "NV_MMA_SYNC_F16_16x8x16_F16"
    rows = np.concatenate([_mma_row(SM80, name, 64, 64, 256, 32, 32),    # 64 KiB
                           _mma_row(SM80, name, 64, 64, 512, 32, 32)])   # 128 KiB > 164 KB / 2
    assert legal(k, rows, SM80).all()
    assert occupancy(k, rows, SM80).tolist() == [2, 1]


def test_iree_row_scores_as_iree_config():
    k = kernel("square", 2)
    space = gpu_space(k, SM80)
    row = row_of_iree(k, None)  # unknown: the fallback
    assert predict(k, space.candidates[:1], SM80, row)[0] == predict(k, row[None], SM80)[0]


def test_scoring_is_vectorised():
    k = Kernel(0, (2048, 2048, 2048), ("m", "n", "k"), 2, MM)
    space = gpu_space(k, SM90)
    many = np.tile(space.candidates, (200_000 // len(space) + 1, 1))
    seconds = predict(k, many, SM90)  # one call scores them all, one prediction per row
    assert seconds.shape == (len(many),) and len(many) >= 200_000
    assert np.isfinite(seconds).all() and (seconds > 0).all()


def test_twin_reads_inputs_at_two_bytes_and_accumulates_and_writes_in_f32():
    """A low-precision twin (bf16 inputs, f32 result): shared memory and the A/B traffic at 2
    bytes, accumulators and C at 4. C dominates a k=16 GEMM: the twin moves about the f32
    kernel's bytes, not the f16 kernel's."""
    f32 = Kernel(0, (4096, 4096, 16), ("m", "n", "k"), 4, MM)
    twin, f16 = dataclasses.replace(f32, input_type="bf16"), dataclasses.replace(f32, element_bytes=2)
    row = _mma_row(SM90, "NV_MMA_SYNC_F32_16x8x16_BF16", 128, 128, 16, 64, 64)
    assert legal(twin, row, SM90).all() and not legal(f16, row, SM90).any()
    assert shared_bytes(twin, row)[0] == shared_bytes(f16, row)[0] == shared_bytes(f32, row)[0] / 2
    t32, t_twin, t16 = (predict(k, row, SM90)[0] for k in (f32, twin, f16))
    assert t16 < 0.7 * t_twin and t_twin <= t32


@pytest.mark.parametrize("target, dtype, expected", [
    ("cuda:sm_90", "bf16", {"NV_MMA_SYNC_F32_16x8x16_BF16"}),
    ("cuda:sm_80", "f16", {"NV_MMA_SYNC_F32_16x8x16_F16"}),
    ("rocm:gfx942", "bf16", {"MFMA_F32_16x16x16_BF16", "MFMA_F32_32x32x8_BF16"}),
    ("vulkan:rdna3", "f16", {"WMMAR3_F32_16x16x16_F16"}),
    ("vulkan:rdna3", "bf16", set()),  # SPIR-V's cooperative matrix loads take no bf16
])
def test_low_precision_twin_offers_the_f32_accumulating_intrinsics_of_its_input(target, dtype, expected):
    """The GPU codegen's twin of an f32 kernel: its space holds the intrinsics that take the
    twin's input type and accumulate in f32 (no renaming of f16 rows), and the predicted best
    config of each pipeline, imposed on a GEMM of such inputs and an f32 result, compiles."""
    t, k = TARGETS[target], kernel("square", 4)
    twin, space = low_precision_twin(k, t, dtype)
    assert (twin.input_type, twin.element_bytes, twin.operand_bytes) == (dtype, 4, 2)
    assert twin.key() not in (k.key(), kernel("square", 2).key())
    used = {INTRINSICS[i - 1] for i in np.unique(space.candidates[:, 1]) if i}
    assert used == expected and all(intrinsic(u)[1] == "f32" for u in used)
    times = predict(twin, space.candidates, t.codegen.gpu)
    picks = [rows[np.argmin(times[rows])] for p in np.unique(space.candidates[1:, 0])
             for rows in [np.flatnonzero(space.candidates[:, 0] == p)]]
    errors = {int(space.candidates[i, 0]): compile_error(gemm_text(256, space.config(i)).replace(
        "bf16", dtype), target) for i in picks}
    assert not any(errors.values()), errors


def test_a_codegen_without_low_precision_offers_no_twin():
    assert low_precision_twin(kernel("square", 4), get_target("host"), "bf16") is None
    assert TARGETS["cuda:sm_90"].codegen.low_precision(kernel("square", 2), "bf16") is None  # not f32


# ---- the space follows the GpuDesc ---------------------------------------------------------

def test_space_follows_the_gpu_description():
    k = kernel("square", 2)
    sm80 = gpu_space(k, SM80).candidates
    used = {INTRINSICS[i - 1] for i in np.unique(sm80[:, 1]) if i}
    assert used and used <= set(SM80.intrinsics) and not any("MFMA" in u or "WMMA" in u for u in used)
    bare = gpu_space(k, dataclasses.replace(SM80, intrinsics=()))
    assert not bare.candidates[:, 1].any() and set(bare.candidates[1:, 0]) == {TF_SIMT}
    assert set(gpu_space(k, RDNA3).candidates[1:, 0]) <= {COOP_MATRIX, SPIRV_SIMT}
    small = gpu_space(k, dataclasses.replace(SM80, shared_per_workgroup=16 * 1024))
    assert len(small) < len(sm80)
    # gfx942 has no f16-accumulating MFMA: an f16 kernel gets SIMT candidates only.
    assert set(gpu_space(k, GFX942).candidates[1:, 0]) == {TF_SIMT}


def test_gpu_config_round_trips_and_rejects_bad_dicts():
    k = kernel("batched", 2)
    config = gpu_space(k, SM80).config(5)
    assert GpuConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert hash(config) == hash(GpuConfig.from_dict(config.to_dict()))
    with pytest.raises(ValueError, match="unknown key 'tiles'"):
        GpuConfig.from_dict({**config.to_dict(), "tiles": [1]})
    with pytest.raises(TypeError, match="workgroup"):
        GpuConfig.from_dict({**config.to_dict(), "workgroup": "64x64"})
    with pytest.raises(ValueError, match="pipeline"):
        GpuConfig.from_dict({**config.to_dict(), "pipeline": "Magic"})
    assert FIELDS[0] == "pipeline" and len(FIELDS) == gpu_space(k, SM80).candidates.shape[1]
