"""Tile space legality, the analytical cost model on a hand-computed case, and the search."""

import dataclasses

import numpy as np
import pytest
import torch

import sft
from sft.cost.model import predict
from sft.cost.targets import HOST, TargetDesc
from sft.models import SUITE
from sft.search import search_kernels
from sft.space.kernels import Kernel
from sft.space.tiles import MAX_VECTOR_BYTES, legal, tile_space

MATMUL = Kernel(op_id=0, domain=(64, 64, 64), roles=("m", "n", "k"), element_bytes=4, maps=())
SIMPLE = TargetDesc(name="simple", backend="host", cores=1, simd_f32=16, vector_registers=32,
                    peak_flops_f32=1e9, l1_bytes=32768, l2_bytes=1 << 20, l1_bandwidth=1e11,
                    l2_bandwidth=1e10, dram_bandwidth=1e9, dispatch_overhead=0.0,
                    workgroup_overhead=0.0)


def test_cost_model_hand_computed():
    # One 64x64 workgroup, 8x16 register block, reduction step 1:
    #   FMA/load reuse 8*1/(8+1), so compute = 2*64^3 / (1e9 * 8/9);
    #   traffic 49152 B from L2 at 1e10 and DRAM at 1e9 (below compute);
    #   loop: 8 * 4 * 64 steps * 2 cycles at 3 GHz.
    t = predict(MATMUL, np.array([[64, 64, 8, 16, 1]]), SIMPLE)[0]
    expected = 2 * 64**3 / (1e9 * 8 / 9) + 8 * 4 * 64 * 2 / 3e9
    assert t == pytest.approx(expected, rel=1e-9)


def test_cost_model_sees_parallelism_and_spills():
    two_cores = dataclasses.replace(SIMPLE, cores=2)
    one_tile, two_tiles = predict(MATMUL, np.array([[64, 64, 8, 16, 1], [32, 64, 8, 16, 1]]), two_cores)
    assert two_tiles < one_tile  # the second core gets work
    fits, spills = predict(MATMUL, np.array([[64, 64, 4, 64, 1], [64, 64, 16, 64, 1]]), SIMPLE)
    assert fits < spills * (16 / 4)  # 16x4 accumulators + loads exceed 32 registers


def test_space_is_legal_and_keeps_iree_default():
    space = tile_space(MATMUL)
    assert (space.candidates[0] == 0).all() and space.config(0) is None
    dm, dn, vm, vn, vk = space.candidates[1:].T
    assert ((dm % vm == 0) & (dn % vn == 0)).all()
    assert (vm * vn * vk * 4 < MAX_VECTOR_BYTES).all()
    bad = np.array([[64, 64, 24, 16, 1], [64, 64, 16, 64, 8]])
    assert not legal(MATMUL, bad).any()
    config = space.config(1)
    assert len(config.distribution) == 3 and config.vector_reduction[:2] == (0, 0)


def test_search_finds_the_brute_force_optimum():
    small = Kernel(1, (4, 16, 32, 16), ("b", "m", "n", "k"), 4, ())
    report = search_kernels([small], HOST, top_k=3)
    space = report.choices[0].space
    brute = [predict(small, space.candidates[i:i + 1], HOST)[0] for i in range(len(space))]
    assert report.choices[0].best == int(np.argmin(brute))
    assert report.scored == len(space) and 0 in report.choices[0].ranked
    assert report.space_size_log10 == pytest.approx(np.log10(len(space)))


def test_model_and_verify_search_keep_numerics():
    case = SUITE["linear"]
    model, inputs = case.build(), case.inputs()
    with torch.no_grad():
        expected = model(*inputs).numpy()
    for mode in ("model", "verify"):
        compiled = sft.compile(model, inputs, search=mode)
        assert compiled.search is not None and compiled.search.scored > 100
        np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    measured = compiled.search.measured[compiled.search.choices[0].kernel.op_id]
    assert 0 in measured  # IREE's default was measured beside the candidates
    chosen = min(measured, key=measured.get)
    assert (chosen == 0) == (compiled.plan.tiles == ())


def test_unknown_search_mode_is_an_error():
    case = SUITE["relu"]
    with pytest.raises(sft.SftError, match="search must be"):
        sft.compile(case.build(), case.inputs(), search="fast")
