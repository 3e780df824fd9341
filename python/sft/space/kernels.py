"""Kernels the search can tile: the contraction roots of an sft program, as plain data."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass

from ..ir import tm
from ..passes import indexing as ix
from ..passes.common import (compute_ops, element_bytes, element_type, map_list, operation,
                             view_permutation)


INPUT_BYTES = {"bf16": 2, "f16": 2}  # the input types a Kernel names (`Kernel.input_type`)


@dataclass(frozen=True)
class Kernel:
    """One contraction: its loop extents and the role of each loop.

    roles: per loop, "m" (rows of the result), "n" (result columns, the contiguous dim), "k"
    (summed), or "b" (any other parallel loop: batch, tiled by 1). element_bytes is the result's
    (and accumulator's) width; input_type names the inputs' type where it is not the result's:
    "bf16" or "f16" for a low-precision twin, which accumulates in its f32 result. Two bytes
    alone cannot tell bf16 from f16, and the GPU intrinsics differ."""

    op_id: int
    domain: tuple[int, ...]
    roles: tuple[str, ...]
    element_bytes: int
    maps: tuple[str, ...]
    input_type: str = ""               # "": the inputs are of the result's type

    def extent(self, role: str) -> int:
        """The product of the loop extents with this role (1 when none has it)."""
        out = 1
        for size, r in zip(self.domain, self.roles):
            if r == role:
                out *= size
        return out

    m = property(lambda self: self.extent("m"))
    n = property(lambda self: self.extent("n"))
    k = property(lambda self: self.extent("k"))
    batch = property(lambda self: self.extent("b"))

    @property
    def flops(self) -> int:
        """Multiplies and adds, two a point of the domain."""
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def reductions_innermost(self) -> bool:
        """No summed loop comes before a parallel one. IREE moves summed loops innermost before
        it reads a config, so a kernel that fails this is compiled in another loop order than
        sft states it in (equal extents would hide that from a match by extents), and sft's
        passes do not tile it."""
        roles = list(self.roles)
        return "k" not in roles or all(r == "k" for r in roles[roles.index("k"):])

    @property
    def operand_bytes(self) -> int:
        """Bytes per element of the inputs A and B."""
        return INPUT_BYTES[self.input_type] if self.input_type else self.element_bytes

    @property
    def b_transposed(self) -> bool:
        """The second operand is contiguous along k rather than n: a register block of B
        vectors along n needs a transpose."""
        dims = _result_dims(self.maps[1]) if len(self.maps) == 3 else []
        return bool(dims) and self.roles[dims[-1]] == "k"

    @property
    def a_along_k(self) -> bool:
        """The first operand is contiguous along k (a row-major A): a register block reads vm of
        its rows, k elements apart."""
        dims = _result_dims(self.maps[0]) if len(self.maps) == 3 else []
        return bool(dims) and self.roles[dims[-1]] == "k"

    def k_stride(self, operand: int) -> int:
        """Elements between consecutive k of input `operand` (0: A, 1: B) as it lies in memory:
        1 where k is its innermost dim, else the extents of the dims inside k (a plain B
        [K, N] steps N a k: a register block walks it down its columns)."""
        dims = _result_dims(self.maps[operand]) if len(self.maps) == 3 else []
        k = [d for d in dims if self.roles[d] == "k"]
        return math.prod(self.domain[d] for d in dims[dims.index(k[0]) + 1:]) if k else 1

    def key(self) -> str:
        """Canonical hash of what the kernel computes (ops, shapes, dtypes), for the tuning DB."""
        text = f"contract|{self.domain}|{self.roles}|{self.element_bytes}|{self.maps}"
        if self.input_type:  # appended only when set: kernels of one type keep their old keys
            text += f"|in={self.input_type}"
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def _result_dims(map_text: str) -> list[int]:
    return [int(d) for d in re.findall(r"d(\d+)", map_text.split("->")[1])]


def same_layout(kernel: Kernel, maps: tuple[str, ...]) -> bool:
    """Whether `maps` (a dispatch's, as IREE holds them) read the operands as `kernel` does."""
    return len(maps) == len(kernel.maps) and all(
        _result_dims(a) == _result_dims(b) for a, b in zip(maps, kernel.maps))


def in_layout(kernel: Kernel, maps: tuple[str, ...]) -> Kernel:
    """The kernel with the operand layouts IREE actually compiles (after it folds transposes into
    the contraction), when `maps` describe the same loops; else the kernel as it is."""
    if len(maps) != 3 or len(kernel.maps) != 3 or _result_dims(maps[2]) != _result_dims(kernel.maps[2]):
        return kernel
    if sorted(_result_dims(maps[0]) + _result_dims(maps[1])) != sorted(
            _result_dims(kernel.maps[0]) + _result_dims(kernel.maps[1])):
        return kernel
    return dataclasses.replace(kernel, maps=tuple(maps))


def contraction_kernels(module) -> list[Kernel]:
    """Contractions whose loops split into batch, m, n and k (matmul-like); others keep IREE's
    own configuration. op ids count sft compute ops in order, as sft-lower stamps them."""
    kernels = []
    for op_id, op in enumerate(compute_ops(module)):
        if op.name == "sft.contract":
            kernel = _classify(op, op_id)
            if kernel is not None:
                kernels.append(kernel)
    return kernels


def roles_of(out_dims: list[int], n_loops: int) -> tuple[str, ...] | None:
    """Loop roles of a contraction writing `out_dims` (result's last dim n, the one before m,
    the others b, the rest k); None unless exactly one loop is summed."""
    if len(out_dims) < 2:
        return None
    roles = ["k"] * n_loops
    for dim in out_dims:
        roles[dim] = "b"
    roles[out_dims[-1]], roles[out_dims[-2]] = "n", "m"
    return tuple(roles) if roles.count("k") == 1 else None


def _as_stored(op, maps: list) -> list:
    """The contraction's maps with each input read as it lies in memory: an input that is a
    transposing sft.view of another tensor is read from that tensor (IREE folds the transpose
    into the contraction's operand: JAX's dX = dY @ W^T reads W across its rows, which a tile
    vectorised along n pays for; 1062 against 231 us for a 32x1024x256 matmul on one Zen 4
    core when the search took it for a plain B)."""
    from .. import dialect

    stored = list(maps)
    for i, value in enumerate(dialect.inputs(op)):
        perm, dims = view_permutation(operation(value.owner)), ix.plain_dims(maps[i])
        if perm is None or dims is None:
            continue
        source = [0] * len(perm)
        for position, read in enumerate(perm):  # result position i reads source position perm[i]
            source[read] = dims[position]
        with op.context:
            stored[i] = ix.affine_map(maps[i].n_dims, [ix.d(x) for x in source])
    return stored


def _classify(op, op_id: int) -> Kernel | None:
    from .. import dialect

    maps = map_list(op.attributes["maps"])
    domain = tuple(tm.DenseI64ArrayAttr(op.attributes["domain"]))
    if any(ix.plain_dims(m) is None for m in maps):
        return None  # convolutions and other non-plain contractions
    maps = _as_stored(op, maps)
    out_dims = ix.plain_dims(maps[-1])
    roles = roles_of(out_dims, len(domain))
    if roles is None:
        return None
    # Inputs narrower than the result (bf16 or f16 accumulated in f32): the kernel says so, for
    # the space's intrinsics and the model's bytes.
    types = {str(element_type(v)) for v in dialect.inputs(op)}
    narrow = types.pop() if len(types) == 1 and types <= set(INPUT_BYTES) else ""
    return Kernel(op_id, domain, roles, element_bytes(op.results[0]), tuple(str(m) for m in maps),
                  input_type=narrow)
