"""The GPU decision space of a contraction kernel, and its legality rules (IREE 3.13).

A candidate is one row of integers (columns FIELDS), so that thousands are generated, checked
and scored at once with numpy; row 0 is all zeros: IREE's own config (no compilation_info).

  pipeline  1 TileAndFuse with an MMA intrinsic, 2 TileAndFuse SIMT (`thread` tiles),
            3 VectorDistribute, 4 SPIR-V CooperativeMatrixVectorize, 5 SPIR-V
            MatmulPromoteVectorize (Vulkan)
  mma       1 + index in INTRINSICS (0: none)
  wg_m wg_n the workgroup's tile of the result, in elements
  k         the reduction step, in elements
  sub_m sub_n  one subgroup's tile (MMA pipelines) or one thread's tile (SIMT), in elements
  subgroup  the subgroup size (0: unstated); stages: prefetch_num_stages or pipeline_depth
  promote   1: operands A and B go through workgroup (shared) memory

The rules in `legal` are IREE's own constraints (what `--iree-codegen-emit-pipeline-constraints`
emits for TileAndFuse and VectorDistribute, see backend/constraints.py) plus those its verifier
cannot check and that compiles showed: an intrinsic must accumulate in the kernel's result type
and take its input type (an f32-accumulating intrinsic on an f16 result fails in both LLVMGPU
pipelines; a kernel of bf16 inputs with an f32 result takes the F32_..._BF16 ones), NV_WMMA
fails to compile, the thread count must match the subgroups the tiles imply.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from .kernels import Kernel

if TYPE_CHECKING:  # the description is only read here
    from ..cost.hardware import GpuDesc

FIELDS = ("pipeline", "mma", "wg_m", "wg_n", "k", "sub_m", "sub_n", "subgroup", "stages", "promote")
TF_MMA, TF_SIMT, VECTOR_DISTRIBUTE, COOP_MATRIX, SPIRV_SIMT = 1, 2, 3, 4, 5
PIPELINE_NAMES = {TF_MMA: "TileAndFuse", TF_SIMT: "TileAndFuse", VECTOR_DISTRIBUTE: "VectorDistribute",
                  COOP_MATRIX: "CooperativeMatrixVectorize", SPIRV_SIMT: "MatmulPromoteVectorize"}
SPIRV_PIPELINES = ("CooperativeMatrixVectorize", "MatmulPromoteVectorize")
DTYPES = {2: "f16", 4: "f32", 8: "f64"}  # a result's type by its bytes: 2 bytes is taken as f16

# Every intrinsic the four targets' `#iree_gpu.target` lists name (IREE 3.13), in a fixed order:
# a candidate's `mma` column indexes it. Names that are not ACC_MxNxK_IN (multi-block MFMAs,
# mixed f8 inputs) parse to no shape and are never used.
INTRINSICS = (
    "NV_MMA_SYNC_F32_16x8x16_F16", "NV_MMA_SYNC_F16_16x8x16_F16", "NV_MMA_SYNC_F32_16x8x16_BF16",
    "NV_MMA_SYNC_F32_16x8x32_F8E4M3FN", "NV_MMA_SYNC_F32_16x8x32_F8E5M2",
    "NV_WMMA_F32_16x16x16_F16", "NV_WMMA_F16_16x16x16_F16",
    "MFMA_F32_16x16x16_BF16", "MFMA_F32_32x32x8_BF16", "MFMA_F32_16x16x32_F8E5M2FNUZ",
    "MFMA_F32_16x16x32_F8E4M3FNUZ", "MFMA_F32_32x32x16_F8E5M2FNUZ", "MFMA_F32_32x32x16_F8E4M3FNUZ",
    "MFMA_I32_16x16x32_I8", "MFMA_I32_32x32x16_I8", "MFMA_F64_16x16x4_F64", "MFMA_F32_16x16x4_F32",
    "MFMA_F32_16x16x16_F16", "MFMA_F32_32x32x8_F16",
    "WMMAR3_F32_16x16x16_F16", "WMMAR3_F16_16x16x16_F16", "WMMAR3_F32_16x16x16_BF16",
    "WMMAR3_BF16_16x16x16_BF16", "WMMAR3_I32_16x16x16_I8",
)
_NAME = re.compile(r"^([A-Z0-9_]+?)_([A-Z0-9]+)_(\d+)x(\d+)x(\d+)_([A-Z0-9]+)$")


def intrinsic(name: str) -> tuple[str, str, int, int, int, str] | None:
    """(family, accumulator, m, n, k, input) of an intrinsic name, lower-case types
    (`NV_MMA_SYNC_F16_16x8x16_F16` -> ("NV_MMA_SYNC", "f16", 16, 8, 16, "f16")); None if the
    name is not of that form."""
    found = _NAME.match(name)
    if not found:
        return None
    fam, acc, m, n, k, inp = found.groups()
    return fam, acc.lower(), int(m), int(n), int(k), inp.lower()


def _shape_table() -> np.ndarray:
    """(m, n, k) per `mma` column value; row 0 (no intrinsic) and unparsed names are 1x1x1."""
    table = np.ones((len(INTRINSICS) + 1, 3), dtype=np.int64)
    for i, name in enumerate(INTRINSICS):
        parsed = intrinsic(name)
        if parsed:
            table[i + 1] = parsed[2:5]
    return table


MMA_SHAPES = _shape_table()


def kernel_types(kernel: Kernel) -> tuple[str, str]:
    """(result/accumulator type, input type) of a kernel, as intrinsic names spell them."""
    result = DTYPES.get(kernel.element_bytes, "")
    return result, kernel.input_type or result


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
class GpuConfig:
    """One GPU codegen decision for a contraction root, per loop of the op (IREE's own fields).

    workgroup: elements per workgroup (0 on k); reduction: the k step, in intrinsics for
    TileAndFuse with an intrinsic, else in elements; subgroup: intrinsics per subgroup
    (TileAndFuse), subgroups (VectorDistribute's subgroup_basis) or elements per subgroup
    (CooperativeMatrixVectorize); thread: elements per thread (TileAndFuse SIMT); native: the
    intrinsic's shape per loop (CooperativeMatrixVectorize's last level)."""

    pipeline: str
    workgroup: tuple[int, ...]
    reduction: tuple[int, ...]
    subgroup: tuple[int, ...] = ()
    thread: tuple[int, ...] = ()
    native: tuple[int, ...] = ()
    mma_kind: str = ""
    promote_operands: tuple[int, ...] = ()
    workgroup_size: tuple[int, ...] = (1, 1, 1)
    subgroup_size: int = 0
    prefetch_stages: int = 0

    def attribute(self) -> str:
        """The #iree_codegen.compilation_info text that imposes this config, as IREE 3.13
        prints its own (executable-configurations)."""
        return (f"#iree_codegen.compilation_info<lowering_config = {self.lowering_config()}, "
                f"translation_info = {self.translation_info()}>")

    def lowering_config(self) -> str:
        if self.pipeline in SPIRV_PIPELINES:
            if self.pipeline == "MatmulPromoteVectorize":  # one level, k's step at k
                levels = [[w or r for w, r in zip(self.workgroup, self.reduction)]]
            else:
                levels = [self.workgroup, self.subgroup, self.reduction, self.native]
            return f"#iree_codegen.lowering_config<tile_sizes = [{', '.join(map(_ints, levels))}]>"
        items = []  # IREE prints the keys sorted
        if self.mma_kind:
            items.append(f"mma_kind = #iree_gpu.mma_layout<{self.mma_kind}>")
        if self.promote_operands:
            items.append(f"promote_operands = {_ints(self.promote_operands)}")
        if self.pipeline == "VectorDistribute":
            derived_ = ", ".join("#iree_gpu.derived_thread_config" for _ in self.promote_operands)
            items.append(f"promotion_types = [{derived_}]")
        items.append(f"reduction = {_ints(self.reduction)}")
        if self.pipeline == "VectorDistribute":
            order = _ints(range(len(self.subgroup)))
            items.append(f"subgroup_basis = [{_ints(self.subgroup)}, {order}]")
        elif self.subgroup:
            items.append(f"subgroup = {_ints(self.subgroup)}")
        if self.thread:
            items.append(f"thread = {_ints(self.thread)}")
        items.append(f"workgroup = {_ints(self.workgroup)}")
        return f"#iree_gpu.lowering_config<{{{', '.join(items)}}}>"

    def translation_info(self) -> str:
        kind = "spirv_pipeline" if self.pipeline in SPIRV_PIPELINES else "pipeline"
        text = (f"#iree_codegen.translation_info<pipeline = #iree_gpu.{kind}<{self.pipeline}> "
                f"workgroup_size = {_ints(self.workgroup_size)}")
        if self.subgroup_size:
            text += f" subgroup_size = {self.subgroup_size}"
        if self.pipeline in SPIRV_PIPELINES:
            text += f", {{pipeline_depth = {self.prefetch_stages} : i64, store_stage = 0 : i64}}"
        elif self.prefetch_stages:
            text += (", {gpu_pipeline_options = #iree_gpu.pipeline_options<"
                     f"prefetch_num_stages = {self.prefetch_stages}>}}")
        return text + ">"

    def to_dict(self) -> dict:
        """The config as JSON-able data (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data) -> "GpuConfig":
        """The config `to_dict` wrote; a bad dict is a ValueError or TypeError naming the key."""
        known = {f.name: f for f in fields(cls)}
        if not isinstance(data, dict):
            raise TypeError(f"a GPU config is an object with keys {sorted(known)}, not {data!r}")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
        for key in ("pipeline", "workgroup", "reduction"):
            if key not in data:
                raise ValueError(f"GPU config has no '{key}'")
        values = {}
        for key, value in data.items():
            if key in ("pipeline", "mma_kind"):
                if not isinstance(value, str):
                    raise TypeError(f"{key} must be a string, not {value!r}")
                values[key] = value
            elif key in ("subgroup_size", "prefetch_stages"):
                if type(value) is not int or value < 0:
                    raise TypeError(f"{key} must be a non-negative integer, not {value!r}")
                values[key] = value
            else:
                if not isinstance(value, list) or not all(type(x) is int and x >= 0 for x in value):
                    raise TypeError(f"{key} must be a list of non-negative integers, not {value!r}")
                values[key] = tuple(value)
        if values["pipeline"] not in set(PIPELINE_NAMES.values()):
            raise ValueError(f"pipeline: unknown pipeline {values['pipeline']!r}")
        return cls(**values)


def _ints(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def config_for(kernel: Kernel, row) -> GpuConfig | None:
    """The GpuConfig of a candidate row for this kernel (None for row 0, IREE's default). Rows
    do not depend on the kernel's extents: one row applies to any kernel of the same roles."""
    p, mma, wg_m, wg_n, k, sub_m, sub_n, subgroup, stages, promote = (int(x) for x in row)
    if p == 0:
        return None
    mma_m, mma_n, mma_k = (int(x) for x in MMA_SHAPES[mma])
    name = INTRINSICS[mma - 1] if mma else ""
    roles = kernel.roles

    def per_loop(m_val, n_val, k_val=0, b_val=1):
        return tuple({"m": m_val, "n": n_val, "k": k_val, "b": b_val}[r] for r in roles)

    workgroup = per_loop(wg_m, wg_n, 0)
    promoted = (0, 1) if promote else ()
    blocks = (wg_m // sub_m) * (wg_n // sub_n)
    if p == TF_MMA:
        return GpuConfig("TileAndFuse", workgroup, per_loop(0, 0, k // mma_k, 0),
                         subgroup=per_loop(sub_m // mma_m, sub_n // mma_n, 0, 0), mma_kind=name,
                         promote_operands=promoted, workgroup_size=(blocks * subgroup, 1, 1),
                         subgroup_size=subgroup, prefetch_stages=stages)
    if p == TF_SIMT:
        return GpuConfig("TileAndFuse", workgroup, per_loop(0, 0, k, 0), thread=per_loop(sub_m, sub_n, 0),
                         promote_operands=promoted, workgroup_size=(blocks, 1, 1),
                         subgroup_size=subgroup, prefetch_stages=stages)
    if p == VECTOR_DISTRIBUTE:
        return GpuConfig("VectorDistribute", workgroup, per_loop(0, 0, k, 0),
                         subgroup=per_loop(wg_m // sub_m, wg_n // sub_n, 1, 1), mma_kind=name,
                         promote_operands=promoted, workgroup_size=(blocks * subgroup, 1, 1),
                         subgroup_size=subgroup, prefetch_stages=stages)
    if p == COOP_MATRIX:
        return GpuConfig("CooperativeMatrixVectorize", workgroup, per_loop(0, 0, k, 0),
                         subgroup=per_loop(sub_m, sub_n, 0), native=per_loop(mma_m, mma_n, mma_k),
                         mma_kind=name, promote_operands=promoted,
                         workgroup_size=(subgroup * (wg_n // sub_n), wg_m // sub_m, 1),
                         subgroup_size=subgroup, prefetch_stages=stages)
    if p == SPIRV_SIMT:
        return GpuConfig("MatmulPromoteVectorize", workgroup, per_loop(0, 0, k, 0),
                         promote_operands=promoted, workgroup_size=(wg_n // sub_n, wg_m // sub_m, 1),
                         prefetch_stages=stages)
    raise ValueError(f"row {list(row)}: unknown pipeline {p}")


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
        return config_for(self.kernel, self.candidates[index])


def gpu_space(kernel: Kernel, gpu: "GpuDesc") -> GpuSpace:
    """Every legal candidate for the kernel on the GPU, IREE's default first."""
    rows = candidate_rows(kernel, gpu)
    rows = rows[legal(kernel, rows, gpu)]
    return GpuSpace(kernel, gpu, np.concatenate([np.zeros((1, len(FIELDS)), dtype=np.int64), rows]))
