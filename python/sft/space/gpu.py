"""The GPU decision space of a contraction kernel, and its legality rules (IREE 3.13).

A candidate is one row of integers (columns `decisions.gpu_tiles.FIELDS`, which also says what
each column means), so that thousands are generated, checked and scored at once with numpy;
row 0 is all zeros: IREE's own config (no compilation_info).

The rules in `legal` are IREE's own constraints (what `--iree-codegen-emit-pipeline-constraints`
emits for TileAndFuse and VectorDistribute, see backend/constraints.py) plus those its verifier
cannot check and that compiles showed: an intrinsic must accumulate in the kernel's result type
and take its input type (an f32-accumulating intrinsic on an f16 result fails in both LLVMGPU
pipelines; a kernel of bf16 inputs with an f32 result takes the F32_..._BF16 ones), NV_WMMA
fails to compile, the thread count must match the subgroups the tiles imply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..decisions.gpu_tiles import (COOP_MATRIX, FIELDS, INTRINSICS, MMA_SHAPES, SPIRV_SIMT, TF_MMA,
                                   TF_SIMT, VECTOR_DISTRIBUTE, GpuConfig, config_of_row, intrinsic,
                                   kernel_types)
from .kernels import Kernel

if TYPE_CHECKING:  # the description is only read here
    from ..cost.hardware import GpuDesc


def usable_intrinsics(kernel: Kernel, gpu: "GpuDesc") -> np.ndarray:
    """Mask over `mma` column values: intrinsics the target offers that accumulate in the
    kernel's result type and take its input type, of a family the target's pipelines compile
    (LLVMGPU: mma.sync and MFMA; NV_WMMA fails in 3.13 with "'tensor.expand_shape' op expected
    dimension 2 ..."; Vulkan: the WMMA cooperative matrices, but none of bf16 inputs: SPIR-V's
    loads fail on them, "'gpu.subgroup_mma_load_matrix' op operand #0 must be memref of ...
    16-bit float ...")."""
    result, inputs = kernel_types(kernel)
    families = ("WMMAR3", "WMMAR4") if gpu.api == "vulkan" else ("NV_MMA_SYNC", "MFMA")
    if gpu.api == "vulkan" and inputs == "bf16":
        families = ()
    mask = np.zeros(len(INTRINSICS) + 1, dtype=bool)
    for i, name in enumerate(INTRINSICS):
        parsed = intrinsic(name)
        mask[i + 1] = (name in gpu.intrinsics and parsed is not None and parsed[0] in families
                       and (parsed[1], parsed[5]) == (result, inputs))
    return mask


def derived(c: np.ndarray) -> dict[str, np.ndarray]:
    """Quantities every rule and the cost model use, per row: the intrinsic shape, whether the
    row runs an intrinsic, threads and subgroups per workgroup (the latter where the row states
    its subgroup size)."""
    p, mma, wg_m, wg_n, k, sub_m, sub_n, subgroup, stages, promote = c.T
    shape = MMA_SHAPES[np.clip(mma, 0, len(INTRINSICS))]
    uses_mma = np.isin(p, (TF_MMA, VECTOR_DISTRIBUTE, COOP_MATRIX))
    blocks = (wg_m // np.maximum(sub_m, 1)) * (wg_n // np.maximum(sub_n, 1))
    threads = np.where(uses_mma, blocks * subgroup, blocks)
    return {"mma_m": shape[:, 0], "mma_n": shape[:, 1], "mma_k": shape[:, 2], "uses_mma": uses_mma,
            "subgroups": np.where(uses_mma, blocks, blocks // np.maximum(subgroup, 1)),
            "threads": threads}


def shared_bytes(kernel: Kernel, c: np.ndarray) -> np.ndarray:
    """Workgroup memory of the promoted A and B tiles: IREE's own formula for the LLVMGPU
    pipelines (input bytes x (wg_m + wg_n) x k; their prefetch keeps the next step in registers, so
    stages do not multiply it: a 64 KiB-exact config compiles on gfx942, 128 KiB does not); the
    SPIR-V pipelines multi-buffer, pipeline_depth + 1 copies (what IREE's "uses N bytes of
    shared memory" error counts: 3 x 24 KiB at depth 2, 2 x 32 KiB fits at depth 1)."""
    p, wg_m, wg_n, k, stages, promote = c[:, 0], c[:, 2], c[:, 3], c[:, 4], c[:, 8], c[:, 9]
    copies = np.where(np.isin(p, (COOP_MATRIX, SPIRV_SIMT)), stages + 1, 1)
    return promote * (wg_m + wg_n) * k * kernel.operand_bytes * copies


def legal(kernel: Kernel, c: np.ndarray, gpu: "GpuDesc") -> np.ndarray:
    """Which rows IREE accepts for this kernel on this GPU (row 0, IREE's default, always)."""
    p, mma, wg_m, wg_n, k, sub_m, sub_n, subgroup, stages, promote = c.T
    d = derived(c)
    m, n, kk = kernel.m, kernel.n, kernel.k
    one = np.maximum
    threads, subgroups = d["threads"], d["subgroups"]
    # Tiles divide the extents exactly: IREE's constraints allow tiles of the extent padded to
    # the intrinsic, but imposed such configs fail to compile (197x96x64 f16 on sm_80 with a
    # 16x32 tile: "'vector.scatter' op write affecting operations on shared resources ...").
    # They fit the workgroup memory and the thread limit.
    ok = ((wg_m >= 1) & (wg_n >= 1) & (k >= 1) & (sub_m >= 1) & (sub_n >= 1)
          & (m % one(wg_m, 1) == 0) & (n % one(wg_n, 1) == 0) & (kk % one(k, 1) == 0)
          & (wg_m % one(sub_m, 1) == 0) & (wg_n % one(sub_n, 1) == 0)
          & (threads >= 1) & (threads <= gpu.max_threads_per_workgroup)
          & (shared_bytes(kernel, c) <= gpu.shared_per_workgroup))
    usable = usable_intrinsics(kernel, gpu)[np.clip(mma, 0, len(INTRINSICS))] & (mma <= len(INTRINSICS))
    mma_m, mma_n, mma_k = d["mma_m"], d["mma_n"], d["mma_k"]
    on_intrinsics = (usable & (sub_m % mma_m == 0) & (sub_n % mma_n == 0) & (k % mma_k == 0)
                     & (subgroup == gpu.subgroup_size))
    # TileAndFuse and VectorDistribute, as IREE's emitted constraints state them: tiles of at
    # most 512 (its VGPR bound), 1 to 32 subgroups per dimension and at most 10 in all,
    # prefetch_num_stages == 2, A and B promoted.
    llvm_mma = (on_intrinsics & (wg_m <= 512) & (wg_n <= 512) & (k <= 512)
                & (wg_m // one(sub_m, 1) <= 32) & (wg_n // one(sub_n, 1) <= 32)
                & (subgroups <= 10) & (stages == 2) & (promote == 1))
    # VectorDistribute also spreads each promoted tile evenly over the threads, and wants a
    # thread count no larger than one of the tile sides; its reduction step is a multiple of
    # the intrinsic's m too.
    vd = (llvm_mma & ((wg_m * k) % one(threads, 1) == 0) & ((wg_n * k) % one(threads, 1) == 0)
          & ((threads <= wg_m) | (threads <= wg_n)) & (k % mma_m == 0))
    # SIMT: whole subgroups; at most 64 accumulators per thread (IREE's default uses 16).
    simt = ((subgroup == gpu.subgroup_size) & (threads % one(subgroup, 1) == 0)
            & (sub_m * sub_n <= 64) & (mma == 0) & (stages == 0))
    # Cooperative matrices: one subgroup tile of whole intrinsics.
    coop = on_intrinsics & (stages >= 1) & (stages <= 2) & (promote == 1)
    # SPIR-V SIMT: threads in whole subgroups, at most 4 columns per thread (one 128-bit vector
    # of f32), multi-buffered 1 or 2 deep; at least two threads across the tile's columns
    # (one thread holding every column fails: "Trying to map to fewer GPU threads than loop
    # iterations", seen on every such row of lavapipe's space for 8x4x4, 16x4x8 kernels).
    spirv_simt = ((mma == 0) & (threads % gpu.subgroup_size == 0) & (sub_n <= 4) & (sub_m <= 8)
                  & (stages >= 1) & (stages <= 2) & (promote == 1) & (subgroup == 0)
                  & (wg_n // one(sub_n, 1) >= 2))
    by_pipeline = np.select(
        [p == TF_MMA, p == TF_SIMT, p == VECTOR_DISTRIBUTE, p == COOP_MATRIX, p == SPIRV_SIMT],
        [llvm_mma, simt, vd, coop, spirv_simt], False)
    spirv = np.isin(p, (COOP_MATRIX, SPIRV_SIMT))
    api_ok = np.where(gpu.api == "vulkan", spirv, ~spirv)
    return np.all(c == 0, axis=1) | (ok & by_pipeline & api_ok)


def _grid(*axes) -> np.ndarray:
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))


def _rows(pipeline, mmas, wgs_m, wgs_n, ks, subs_m, subs_n, subgroups, stages, promotes):
    return _grid([pipeline], mmas, wgs_m, wgs_n, ks, subs_m, subs_n, subgroups, stages, promotes)


def candidate_rows(kernel: Kernel, gpu: "GpuDesc") -> np.ndarray:
    """Every row of the space before the legality filter: per pipeline the target runs, powers
    of two around IREE's own choices."""
    mmas = np.flatnonzero(usable_intrinsics(kernel, gpu))
    sg = gpu.subgroup_size

    def sizes(choices, extent, largest):  # the whole extent too when no power of two divides it
        return sorted(set(choices) | ({extent} if extent <= largest else set()))

    m_tiles = sizes((16, 32, 64, 128, 256), kernel.m, 256)
    n_tiles = sizes((16, 32, 64, 128, 256), kernel.n, 256)
    ks, subs = sizes((16, 32, 64, 128), kernel.k, 128), (16, 32, 64, 128)
    simt_m, simt_n = sizes((8, 16, 32, 64, 128), kernel.m, 128), sizes((32, 64, 128, 256), kernel.n, 256)
    simt_k = sizes((8, 16, 32), kernel.k, 32)
    parts = []
    if gpu.api == "vulkan":
        if len(mmas):
            parts.append(_rows(COOP_MATRIX, mmas, m_tiles, n_tiles, (16, 32, 64), (16, 32, 64),
                               (16, 32, 64), [sg], (1, 2), [1]))
        parts.append(_rows(SPIRV_SIMT, [0], simt_m, sizes((16, 32, 64, 128), kernel.n, 128), simt_k,
                           (1, 2, 4, 8), (1, 2, 4), [0], (1, 2), [1]))
    else:
        if len(mmas):
            for pipeline in (TF_MMA, VECTOR_DISTRIBUTE):
                parts.append(_rows(pipeline, mmas, m_tiles, n_tiles, ks, subs, (8, 16, 32, 64, 128),
                                   [sg], [2], [1]))
        parts.append(_rows(TF_SIMT, [0], simt_m, simt_n, simt_k, (1, 2, 4, 8), (1, 2, 4, 8, 16),
                           [sg], [0], (0, 1)))
    return np.concatenate(parts).astype(np.int64)


@dataclass(frozen=True)
class GpuSpace:
    kernel: Kernel
    gpu: "GpuDesc"
    candidates: np.ndarray  # (count, len(FIELDS)); row 0 is IREE's default (zeros)

    FIELDS = FIELDS

    def __len__(self) -> int:
        return len(self.candidates)

    def config(self, index: int) -> GpuConfig | None:
        """The GpuConfig of candidate `index`; None for IREE's default."""
        return config_of_row(self.kernel, self.candidates[index])


def gpu_space(kernel: Kernel, gpu: "GpuDesc") -> GpuSpace:
    """Every legal candidate for the kernel on the GPU, IREE's default first."""
    rows = candidate_rows(kernel, gpu)
    rows = rows[legal(kernel, rows, gpu)]
    return GpuSpace(kernel, gpu, np.concatenate([np.zeros((1, len(FIELDS)), dtype=np.int64), rows]))
