"""Tile legality follows the host's vector ISA, and agrees with what IREE compiles for it."""

import numpy as np
import pytest

from sft.backend import compile_module
from sft.cost.host import AVX2, AVX512
from sft.errors import SftError
from sft.measure import kernel_program
from sft.decisions import TileConfig
from sft.space.kernels import Kernel
from sft.space.tiles import legal, tile_space
from sft.targets import get_target

MATMUL = Kernel(0, (64, 64, 64), ("m", "n", "k"), 4,
                ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"))


def test_the_space_follows_the_isa():
    narrow, wide = tile_space(MATMUL, isa=AVX2), tile_space(MATMUL, isa=AVX512)
    assert len(narrow) < len(wide)
    vector_bytes = lambda space: (space.candidates[1:, 2:].prod(axis=1) * 4).max()
    assert vector_bytes(narrow) < 16384 <= vector_bytes(wide) < 32768


@pytest.mark.parametrize("cpu, isa", [("haswell", AVX2), ("skylake-avx512", AVX512)])
def test_legality_agrees_with_iree_at_the_vector_size_limit(cpu, isa):
    """The largest vector op the rule admits compiles; twice that IREE refuses."""
    limit = isa.max_vector_op_bytes
    for vk, expect_ok in ((limit // (8 * 16 * 4) // 2, True), (limit // (8 * 16 * 4), False)):
        candidate = np.array([[64, 64, 8, 16, vk]])
        assert bool(legal(MATMUL, candidate, isa)[0]) == expect_ok
        config = TileConfig((64, 64, 0), (8, 16, 0), (0, 0, vk))
        flags = (f"--iree-llvmcpu-target-cpu={cpu}",)
        if expect_ok:
            compile_module(kernel_program(MATMUL, config), get_target("host"), flags)
        else:
            with pytest.raises(SftError, match="large vector sizes|iree-compile failed"):
                compile_module(kernel_program(MATMUL, config), get_target("host"), flags)
