"""The GPU kernel decision: a config for a contraction root on IREE's GPU pipelines (IREE 3.13).

Its forms: a candidate row (integers, columns FIELDS; all zeros for IREE's own config), a
`GpuConfig` (IREE's own fields, per loop of the op), the `#iree_codegen.compilation_info` text
IREE 3.13 prints for it, and IREE's own config as the profile recorded it (`Dispatch.gpu`),
read back into a row by `row_of_iree`.

  pipeline  1 TileAndFuse with an MMA intrinsic, 2 TileAndFuse SIMT (`thread` tiles),
            3 VectorDistribute, 4 SPIR-V CooperativeMatrixVectorize, 5 SPIR-V
            MatmulPromoteVectorize (Vulkan)
  mma       1 + index in INTRINSICS (0: none)
  wg_m wg_n the workgroup's tile of the result, in elements
  k         the reduction step, in elements
  sub_m sub_n  one subgroup's tile (MMA pipelines) or one thread's tile (SIMT), in elements
  subgroup  the subgroup size (0: unstated); stages: prefetch_num_stages or pipeline_depth
  promote   1: operands A and B go through workgroup (shared) memory

A kernel here is anything with `roles`, `m`, `n`, `k`, `element_bytes` and `input_type`
(`space.kernels.Kernel`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

import numpy as np

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


def kernel_types(kernel) -> tuple[str, str]:
    """(result/accumulator type, input type) of a kernel, as intrinsic names spell them."""
    result = DTYPES.get(kernel.element_bytes, "")
    return result, kernel.input_type or result


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


def config_of_row(kernel, row) -> GpuConfig | None:
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


# What IREE picks for a contraction when its config cannot be read: the SIMT config it gives an
# f32 matmul on CUDA (workgroup 32x128, a 1x16 tile per thread, k steps of 32).
FALLBACK = dict(pipeline=TF_SIMT, mma=0, wg_m=32, wg_n=128, k=32, sub_m=1, sub_n=16, subgroup=32,
                stages=0, promote=0)


def _row(**values) -> np.ndarray:
    return np.array([values.get(f, 0) for f in FIELDS], dtype=np.int64)


def _at(values, roles, role, default=0) -> int:
    """The entry of a per-loop list for the (first) loop of `role`."""
    if not isinstance(values, (list, tuple)) or len(values) != len(roles) or role not in roles:
        return default
    value = values[roles.index(role)]
    return value if type(value) is int else default


def row_of_iree(kernel, fields: dict | None) -> np.ndarray:
    """IREE's own config as a candidate row, from the GPU fields the profile recorded for the
    kernel's dispatch (`Dispatch.gpu`: pipeline, workgroup_size, subgroup_size, prefetch or
    pipeline depth, lowering_config); FALLBACK, clipped to the extents, when unknown."""
    roles, m, n, k = kernel.roles, kernel.m, kernel.n, kernel.k
    fallback = _row(**{**FALLBACK, "wg_m": min(32, m), "wg_n": min(128, n), "k": min(32, k),
                       "sub_n": min(16, n)})
    if not isinstance(fields, dict) or not isinstance(fields.get("lowering_config"), dict):
        return fallback
    lc, pipeline = fields["lowering_config"], fields.get("pipeline")

    def number(key, default):
        return fields[key] if type(fields.get(key)) is int else default
    sg = number("subgroup_size", 0)
    size = fields.get("workgroup_size")
    size = size if isinstance(size, list) and all(type(x) is int for x in size) else [1, 1, 1]
    mma_name = lc.get("mma_kind", "")
    mma = INTRINSICS.index(mma_name) + 1 if mma_name in INTRINSICS else 0
    mma_m, mma_n, mma_k = (int(x) for x in MMA_SHAPES[mma])
    wg_m, wg_n = _at(lc.get("workgroup"), roles, "m"), _at(lc.get("workgroup"), roles, "n")
    promote = int(bool(lc.get("promote_operands")))
    stages = number("prefetch_num_stages", 0)
    if pipeline == "TileAndFuse" and mma:
        sub = lc.get("subgroup")
        row = _row(pipeline=TF_MMA, mma=mma, wg_m=wg_m, wg_n=wg_n,
                   k=_at(lc.get("reduction"), roles, "k") * mma_k, sub_m=_at(sub, roles, "m") * mma_m,
                   sub_n=_at(sub, roles, "n") * mma_n, subgroup=sg, stages=stages, promote=promote)
    elif pipeline == "TileAndFuse":
        th = lc.get("thread")
        row = _row(pipeline=TF_SIMT, wg_m=wg_m, wg_n=wg_n, k=_at(lc.get("reduction"), roles, "k"),
                   sub_m=_at(th, roles, "m"), sub_n=_at(th, roles, "n"), subgroup=sg,
                   stages=stages, promote=promote)
    elif pipeline == "VectorDistribute" and mma:
        basis = lc.get("subgroup_basis") or [[]]
        counts = basis[0] if isinstance(basis, (list, tuple)) and basis else []
        cnt_m, cnt_n = max(_at(counts, roles, "m", 1), 1), max(_at(counts, roles, "n", 1), 1)
        row = _row(pipeline=VECTOR_DISTRIBUTE, mma=mma, wg_m=wg_m, wg_n=wg_n,
                   k=_at(lc.get("reduction"), roles, "k"), sub_m=wg_m // cnt_m, sub_n=wg_n // cnt_n,
                   subgroup=sg, stages=stages, promote=promote)
    elif pipeline in ("CooperativeMatrixVectorize", "MatmulPromoteVectorize"):
        levels = list(lc.get("tile_sizes") or [])
        padded = [list(level) + [0] * (len(roles) - len(level)) for level in levels]
        top = padded[0] if padded else []
        wg_m, wg_n = _at(top, roles, "m"), _at(top, roles, "n")
        depth = number("pipeline_depth", 1)
        if pipeline == "CooperativeMatrixVectorize" and len(padded) >= 4:
            native = ("WMMA", *kernel_types(kernel), _at(padded[3], roles, "m"),
                      _at(padded[3], roles, "n"), _at(padded[3], roles, "k"))
            mma = next((i + 1 for i, name in enumerate(INTRINSICS) if _coop_shape(name) == native), 0)
            row = _row(pipeline=COOP_MATRIX, mma=mma, wg_m=wg_m, wg_n=wg_n,
                       k=_at(padded[2], roles, "k"), sub_m=_at(padded[1], roles, "m"),
                       sub_n=_at(padded[1], roles, "n"), subgroup=sg, stages=depth, promote=1)
        else:
            x, y = (list(size) + [1, 1])[:2]
            row = _row(pipeline=SPIRV_SIMT, wg_m=wg_m, wg_n=wg_n, k=_at(top, roles, "k"),
                       sub_m=wg_m // max(y, 1), sub_n=wg_n // max(x, 1), stages=depth, promote=1)
    else:
        return fallback
    # A row whose tiles do not read back (a form this parser does not know) scores as the fallback.
    return row if min(row[2], row[3], row[4], row[5], row[6]) > 0 else fallback



def _coop_shape(name: str):
    """(family prefix, accumulator type, input type, m, n, k) of a WMMA intrinsic."""
    parsed = intrinsic(name)
    if parsed is None:
        return None
    return (parsed[0][:4], parsed[1], parsed[5], *parsed[2:5])
