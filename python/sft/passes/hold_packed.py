"""sft-hold-packed: take a held weight packed in panels, read by IREE's 4-D matmul (mmt4d).

A weight held [K, N] (`passes.hold_transposed`) is still read across rows: each step over k
of a register block loads its n columns from a row N floats away from the last. Held instead
as [N/n0, K, n0, 1] (panels of n0 columns, each panel's k rows one after the other), the
block streams its panel in order, and IREE's codegen of `linalg.mmt4d` at an m0 x n0 block
reaches the vendor library's rate: on the 2-core Intel Xeon VM (AVX-512, one thread), a
128x256 by 256x1024 product took 400 us at 8x32 (MKL: 402; IREE's plain matmul with the
weight held [K, N]: 575-595), and the 256-1024-256 MLP at batch 32 251 us against 402
(docs/results.md, "Weights held packed").

The rewrite is on the lowered linalg (in IREE's context, after the kernel configs: a packed
matmul's config is dropped, and IREE configures the mmt4d, whose inner dims are the block):
each `linalg.matmul` whose B is a packed argument becomes the pack of A into [M/m0, K, m0, 1]
(rows padded with zeros where m0 does not divide M), `linalg.mmt4d`, and the unpack of its
[M/m0, N/n0, m0, n0] result; the accumulator is packed the same way (IREE folds a packed fill).
`packed` lists (argument, m0, n0): each argument must be a [K, N] matrix (held, so transposes
no longer read it) read only as B of plain matmuls, with n0 dividing N. IREE's micro-kernels
take only their own block sizes and run any other at a fallback's rate (8x32: 28 ms against
0.4), so a packed plan is compiled with them off (`Plan.iree_flags`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from ..decisions.kind import IREE, DecisionKind
from ..errors import IllegalPlan
from ..ir import dialects_of

UKERNELS_OFF = "--iree-llvmcpu-enable-ukernels=none"


def _matrix(value) -> tuple[int, int] | None:
    """The static shape of a value that is a matrix (a 2-D ranked tensor), else None."""
    match = re.fullmatch(r"tensor<(\d+)x(\d+)x\w+>", str(value.type))
    return (int(match[1]), int(match[2])) if match else None


# a plain matmul's maps (C[m, n] += A[m, k] B[k, n]), as linalg.matmul prints them
PLAIN_MAPS = ("[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, "
              "affine_map<(d0, d1, d2) -> (d0, d1)>]")


def _plain(op) -> bool:
    return op.name == "linalg.matmul" and op.parent.name == "func.func" and (
        "indexing_maps" not in op.attributes or str(op.attributes["indexing_maps"]) == PLAIN_MAPS)


def _plain_matmul_readers(func, position: int) -> list | None:
    """The matmuls that read argument `position` of `func` as B, when those are its only
    readers (plain `linalg.matmul`: no transposing maps, at the function's top level)."""
    args = func.regions[0].blocks[0].arguments
    if not 0 <= position < len(args) or _matrix(args[position]) is None:
        return None
    uses = list(args[position].uses)
    if not uses or any(not _plain(use.owner) or use.operand_number != 1 for use in uses):
        return None
    return [use.owner for use in uses]


def _entry(module):
    return next(op for op in module.body.operations if op.operation.name == "func.func")


def packable(module, candidates: tuple[int, ...], n0: int) -> tuple[int, ...]:
    """Those of the argument positions `candidates` of `module`'s entry (lowered linalg) that
    sft-hold-packed can take in panels of `n0` columns."""
    with module.context:
        func = _entry(module)
        args = func.regions[0].blocks[0].arguments
        return tuple(a for a in candidates if _plain_matmul_readers(func, a) is not None
                     and _matrix(args[a])[1] % n0 == 0)


def _rewrite(matmul, m0: int, n0: int, linalg, tensor, ir) -> None:
    a, b, acc = matmul.operands
    (m, k), (_, n) = _matrix(a), _matrix(acc)  # (B is packed already)
    m1 = -(-m // m0)
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(matmul), matmul.location:
        zero = ir.Operation.create("arith.constant", results=[f32],
                                   attributes={"value": ir.FloatAttr.get(f32, 0.0)}).result
        pad = dict(padding_value=zero) if m % m0 else {}
        a_packed = linalg.pack(a, tensor.empty([m1, k, m0, 1], f32), [0, 1], [m0, 1], **pad)
        acc_packed = linalg.pack(acc, tensor.empty([m1, n // n0, m0, n0], f32), [0, 1], [m0, n0], **pad)
        product = linalg.mmt4d(a_packed, b, outs=[acc_packed])
        result = linalg.unpack(product, tensor.empty([m, n], f32), [0, 1], [m0, n0])
    matmul.results[0].replace_all_uses_with(result)
    matmul.erase()


def hold_packed(module, packed: tuple[tuple[int, int, int], ...]) -> None:
    """Rewrite `module`'s entry to take each (argument, m0, n0) of `packed` in panels (see the
    module docstring); an IllegalPlan where one cannot be."""
    if not packed:
        return
    ir, linalg, tensor = dialects_of(module)
    with module.context, ir.Location.unknown():
        func = _entry(module)
        block = func.regions[0].blocks[0]
        for position, m0, n0 in packed:
            readers = _plain_matmul_readers(func, position)
            if readers is None or m0 < 1 or n0 < 1 or _matrix(block.arguments[position])[1] % n0:
                raise IllegalPlan(f"plan holds argument {position} packed in {m0}x{n0} blocks: it "
                                  "is not a matrix (held: plan.held) read only as B of plain "
                                  "matmuls, in whole panels of that many columns")
            for matmul in readers:
                if not all(_matrix(v) and str(v.type).endswith("xf32>") for v in matmul.operands):
                    raise IllegalPlan(f"plan holds argument {position} packed: a matmul reading "
                                      "it is not f32 on static matrices")
            k, n = _matrix(block.arguments[position])
            block.arguments[position].set_type(ir.RankedTensorType.get(
                [n // n0, k, n0, 1], ir.F32Type.get()))
            for matmul in readers:
                _rewrite(matmul, m0, n0, linalg, tensor, ir)
        func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], func_type.results))


def packed_array(array: np.ndarray, n0: int) -> np.ndarray:
    """A [K, N] held weight as the packed module takes it: [N/n0, K, n0, 1]."""
    k, n = array.shape
    return np.ascontiguousarray(np.asarray(array).reshape(k, n // n0, n0).transpose(1, 0, 2)[..., None])


def unpacked_array(array: np.ndarray) -> np.ndarray:
    """`packed_array`'s inverse: [N/n0, K, n0, 1] -> [K, N]."""
    n1, k, n0, _ = array.shape
    return np.ascontiguousarray(np.asarray(array)[..., 0].transpose(1, 0, 2).reshape(k, n1 * n0))


def block_of(desc) -> tuple[int, int]:
    """(m0, n0): the register block a packed matmul runs at on a CPU of `desc`: 8 rows of as
    many vectors as keep half the vector registers accumulating (AVX-512's 32 registers: 8x32,
    16 accumulators; AVX2's 16: 8x8)."""
    return 8, desc.simd_f32 * max(desc.vector_registers // 16, 1)


def packed_twin(plan, target):
    """`plan` with every argument it holds also packed at the target's block (`block_of`);
    None where it holds none, packs operands itself (data tiling) or compiles the import, or
    the target does not pack weights (`Target.pack_weights`)."""
    if (not target.pack_weights or not plan.held or plan.packed or plan.as_imported
            or "--iree-opt-data-tiling" in plan.flags):
        return None
    m0, n0 = block_of(target.desc)
    return replace(plan, packed=tuple((a, m0, n0) for a in plan.held))


def triples(value, what: str) -> tuple[tuple[int, int, int], ...]:
    if not isinstance(value, list) or not all(
            isinstance(t, list) and len(t) == 3 and all(type(x) is int for x in t) for t in value):
        raise TypeError(f"{what} must be a list of [argument, m0, n0] triples, not {value!r:.60}")
    return tuple(tuple(t) for t in value)


@dataclass(frozen=True)
class HoldPackedPass:
    """Take held weights packed in panels, read by mmt4d: {args=A:M0:N0,...}."""

    packed: tuple[tuple[int, int, int], ...] = ()
    name = "sft-hold-packed"

    @classmethod
    def from_options(cls, text: str) -> "HoldPackedPass":
        """`args=A:M0:N0,...` (sft-opt -p 'sft-hold-packed{args=0:8:32}')."""
        key, _, value = text.partition("=")
        try:
            if key.strip() != "args":
                raise ValueError
            return cls(tuple(tuple(int(x) for x in item.split(":", 2)) for item in value.split(",")
                             if item.strip()))
        except ValueError:
            raise IllegalPlan(f"{cls.name} takes args=A:M0:N0,..., not '{text}'") from None

    def __call__(self, module) -> None:
        hold_packed(module, self.packed)


KIND = DecisionKind(
    field="packed", type="tuple[tuple[int, int, int], ...]", default=(),
    doc="held arguments (argument, m0, n0) taken packed in panels of n0 columns and multiplied "
        "by mmt4d at an m0 x n0 block (each must be held too)", parse=triples, stage=IREE,
    make_pass=HoldPackedPass,
    describe=lambda packed: f"parameters {[p for p, _, _ in packed]} held packed "
                            f"({packed[0][1]}x{packed[0][2]} blocks)")
