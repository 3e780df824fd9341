"""Tile space legality, the analytical cost model on a hand-computed case, and the search."""

import dataclasses

import numpy as np
import pytest
import torch

import sft
from sft.cost.model import bandwidth, fused_seconds, predict
from sft.cost.trust import KINDS, Trust
from sft.decisions import TileConfig
from sft.decisions.cpu_tiles import IREE_DEFAULT
from sft.cost.hardware import TargetDesc
from sft.models import SUITE
from sft.backend.profile import Dispatch, Profile
from sft.search import search_program
from sft.space.kernels import Kernel
from sft.space.options import REASSOCIATE, ModuleOptions, cpu_option_space
from sft.targets import get_target
from sft.cost.host import host_isa
from sft.space.tiles import legal, tile_space

MATMUL = Kernel(op_id=0, domain=(64, 64, 64), roles=("m", "n", "k"), element_bytes=4, maps=())
SIMPLE = TargetDesc(name="simple", cores=1, simd_f32=16, vector_registers=32,
                    peak_flops_f32=1e9, l1_bytes=32768, l2_bytes=1 << 20, l1_bandwidth=1e11,
                    l2_bandwidth=1e10, dram_bandwidth=1e9, dispatch_overhead=0.0,
                    workgroup_overhead=0.0, parallel_efficiency=1.0)
HOST_TARGET = get_target("host")
HOST = HOST_TARGET.desc


def _everywhere(profile):
    """The same IREE profile under every option set's dispatch-forming flags."""
    return {o.formation_flags: profile for o in cpu_option_space()}


def test_cost_model_hand_computed():
    # One 64x64 workgroup, 8x16 register blocks (one vector of B), reduction step 1, the kernel
    # model's default constants; a cycle is 2 FMA/cycle * 16 lanes * 2 / 1e9 FLOP/s = 64 ns.
    #   per k: FMA port 8/2 = 4 cycles, load port (8 broadcasts + 1 vector of B)/2 = 4.5, no
    #   shuffles, no spill (8 + 1 + 1 live of 32); the busiest port 4.5 plus half the others'
    #   4: 6.5 cycles, above the FMA latency (4); 32 blocks * 64 k * (6.5 + 0.5 loop) cycles.
    #   L2: 3 panels of 16 KiB at 32 B/cycle = 1536 cycles, under compute: half of it exposed.
    t = predict(MATMUL, np.array([[64, 64, 8, 16, 1]]), SIMPLE)[0]
    expected = (32 * 64 * (6.5 + 0.5) + 0.5 * 3 * 16384 / 32) * 2 * 2 * 16 / 1e9
    assert t == pytest.approx(expected, rel=1e-9)


def test_cost_model_sees_parallelism_and_spills():
    two_cores = dataclasses.replace(SIMPLE, cores=2)
    one_tile, two_tiles = predict(MATMUL, np.array([[64, 64, 8, 16, 1], [32, 64, 8, 16, 1]]), two_cores)
    assert two_tiles < one_tile  # the second core gets work
    fits, spills = predict(MATMUL, np.array([[64, 64, 4, 64, 1], [64, 64, 16, 64, 1]]), SIMPLE)
    assert fits < spills * (16 / 4)  # 16x4 accumulators + loads exceed 32 registers


def _matmul(k: int, b_transposed: bool) -> Kernel:
    b = "(d0, d1, d2) -> (d1, d2)" if b_transposed else "(d0, d1, d2) -> (d2, d1)"
    return Kernel(0, (128, 256, k), ("m", "n", "k"), 4,
                  ("(d0, d1, d2) -> (d0, d2)", b, "(d0, d1, d2) -> (d0, d1)"))


@pytest.mark.parametrize("b_transposed", [False, True])
def test_cost_model_sees_rows_that_share_an_l1_set(b_transposed):
    # Rows k = 1024 floats apart all fall in one set of a 32 KiB 8-way L1 (a 4 KiB set span):
    # a 16-row block of A then reloads its lines from L2 at every k (measured on Zen 4: 1469
    # against 627 us at k = 1040), an 8-row block does not.
    blocks = np.array([[64, 64, 16, 16, 16], [64, 64, 8, 16, 16]])
    per_k = {k: predict(_matmul(k, b_transposed), blocks, SIMPLE) / k for k in (1024, 1040, 2048)}
    sixteen, eight = 0, 1
    assert per_k[1024][sixteen] > 1.5 * per_k[1040][sixteen]
    assert per_k[2048][sixteen] > 1.5 * per_k[1040][sixteen]
    assert per_k[1024][eight] > per_k[1040][eight] * (1.0 - 1e-9)
    # (with B along k, its 16 rows share A's sets whichever A's block: both blocks lose theirs)
    assert (per_k[1024][sixteen] > per_k[1024][eight]) or b_transposed
    assert (per_k[1024][eight] > per_k[1040][eight] * 1.01) == b_transposed  # B's 16 rows
    assert per_k[1040][sixteen] < per_k[1040][eight]  # without the conflict, 16 rows win
    # 8 rows of A and 8 of a B contiguous along k, at the same offsets of their buffers: 16
    # lines in one set, neither operand past the ways alone (IREE's AVX2 block of a linear
    # layer: 20 GFLOP/s at k = 1024 on a Zen 3 core, 52 at k = 1040)
    eights = np.array([[32, 64, 8, 8, 8]])
    both = {k: predict(_matmul(k, b_transposed), eights, SIMPLE)[0] / k for k in (1024, 1040)}
    assert (both[1024] > 1.5 * both[1040]) == b_transposed


def test_cost_model_sees_a_column_walk_past_l1s_ways():
    # B [K, N] read down its columns (a segment of vn a k): the next block along m reads the
    # walk's segments again, which at N = 1024 floats (4 KiB, L1's set span; a page a row) all
    # shared one set. Measured on a Zen 3 core, 4x16 and 8x8 blocks: 24-34 GFLOP/s at N =
    # 1024, 43-49 at N = 1040; rows 1 KiB apart share pages and lose less.
    def plain(n, m=128, a_stored_km=False):
        a = "(d0, d1, d2) -> (d2, d0)" if a_stored_km else "(d0, d1, d2) -> (d0, d2)"
        return Kernel(0, (m, n, 256), ("m", "n", "k"), 4,
                      (a, "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"))

    block = np.array([[32, 16, 4, 16, 16]])
    per_flop = {n: predict(plain(n), block, SIMPLE)[0] / plain(n).flops for n in (256, 1024, 1040)}
    assert per_flop[1024] > 1.3 * per_flop[1040]
    assert per_flop[1040] < per_flop[256] < per_flop[1024]
    assert plain(1024).k_stride(1) == 1024 and plain(1024).k_stride(0) == 1
    # an A stored [K, M] is walked down its columns alike, M = 1024 against 1056
    a_km = {m: predict(plain(1040, m, True), block, SIMPLE)[0] / plain(1040, m, True).flops
            for m in (1024, 1056)}
    assert a_km[1024] > 1.3 * a_km[1056]
    # a linear layer's operands are read along k: no walk down columns
    assert _matmul(1024, True).k_stride(0) == _matmul(1024, True).k_stride(1) == 1


def test_space_is_legal_and_keeps_iree_default():
    space = tile_space(MATMUL)
    assert (space.candidates[0] == 0).all() and space.config(0) is None
    dm, dn, vm, vn, vk = space.candidates[1:].T
    assert ((dm % vm == 0) & (dn % vn == 0)).all()
    assert (vm * vn * vk * 4 < host_isa().max_vector_op_bytes).all()
    bad = np.array([[64, 64, 24, 16, 1], [64, 64, 16, 64, 8]])
    assert not legal(MATMUL, bad).any()
    config = space.config(1)
    assert len(config.distribution) == 3 and config.vector_reduction[:2] == (0, 0)


def test_search_finds_the_brute_force_optimum():
    small = Kernel(1, (4, 16, 32, 16), ("b", "m", "n", "k"), 4, ())
    profile = Profile((Dispatch(0, "batch_matmul_4x16x32x16_f32", small.domain, 0, None),), 1)
    report = search_program([small], _everywhere(profile), HOST_TARGET, [ModuleOptions()], top_k=3)
    choice = report.choices[0]
    # The search ranks by the target's codegen (on a host never calibrated, as in the tests,
    # IREE's default is favoured by UNCALIBRATED_MARGIN): so does the brute force.
    brute = [HOST_TARGET.codegen.predict(small, choice.space.candidates[i:i + 1], HOST, HOST.cores,
                                         IREE_DEFAULT)[0] for i in range(len(choice.space))]
    assert choice.best == int(np.argmin(brute))
    assert report.scored == len(choice.space) and 0 in choice.ranked
    assert report.space_size_log10 == pytest.approx(np.log10(len(choice.space)))


def test_a_contraction_fused_with_transposed_tensors_keeps_iree_config():
    # Its dispatch also walks a weight's update across rows: the model prices no tile of that.
    big = Kernel(0, (512, 128, 64), ("m", "n", "k"), 4, ())
    name = "matmul_512x128x64_f32"
    plain = Profile((Dispatch(0, name, big.domain, 1 << 20, None),), 1)
    fused = Profile((Dispatch(0, name, big.domain, 1 << 20, None, transposed_bytes=1 << 20),), 1)
    searched = search_program([big], _everywhere(plain), HOST_TARGET, [ModuleOptions()], top_k=3)
    kept = search_program([big], _everywhere(fused), HOST_TARGET, [ModuleOptions()], top_k=3)
    assert len(searched.choices[0].ranked) > 1  # candidates beside IREE's
    assert kept.choices[0].ranked == (0,) and kept.choices[0].best == 0


def test_a_contraction_dispatch_is_priced_at_no_less_than_its_buffers_streamed_once():
    # A weight gradient with the optimizer's update fused in: 4 MFLOP of kernel, 4 MiB of
    # weight, state and results (a training step's dispatch at batch 8).
    kernel = Kernel(0, (256, 1024, 8), ("m", "n", "k"), 4, ())
    name = "matmul_256x1024x8_f32"
    alone = Profile((Dispatch(0, name, kernel.domain, 1 << 20, None),), 1)
    fused = Profile((Dispatch(0, name, kernel.domain, 4 << 20, None),), 1)
    serial = [ModuleOptions(serial=True)]
    light = search_program([kernel], _everywhere(alone), HOST_TARGET, serial)
    heavy = search_program([kernel], _everywhere(fused), HOST_TARGET, serial)
    streamed = (4 << 20) / bandwidth(4 << 20, HOST, 1)
    assert heavy.ranked[0].predicted >= streamed > light.ranked[0].predicted - HOST.serial_invoke_overhead
    assert heavy.choices[0].predicted[0] == light.choices[0].predicted[0]  # the tiles' own price


def test_what_a_contraction_dispatch_fuses_is_streamed_after_its_kernel():
    # The same weight gradient: the update's 3 MiB beyond the kernel's operands and result take
    # their own time beside the kernel's (measured 100-107 us against a 54 us kernel and 51 us
    # of bytes on a Zen 4 core), not under it; bytes it reads transposed are priced apart.
    kernel = Kernel(0, (256, 1024, 8), ("m", "n", "k"), 4, ())
    name = "matmul_256x1024x8_f32"
    own = (256 * 8 + 8 * 1024 + 256 * 1024) * 4
    alone = Dispatch(0, name, kernel.domain, own, None)
    fused = Dispatch(0, name, kernel.domain, own + (3 << 20), None)
    transposed = Dispatch(0, name, kernel.domain, own + (3 << 20), None, transposed_bytes=3 << 20)
    assert fused_seconds(alone, kernel, HOST, 1) == 0.0 == fused_seconds(None, kernel, HOST, 1)
    assert fused_seconds(transposed, kernel, HOST, 1) == 0.0
    extra = fused_seconds(fused, kernel, HOST, 1)
    assert extra == pytest.approx((3 << 20) / bandwidth(fused.bytes, HOST, 1))
    serial = [ModuleOptions(serial=True)]
    light = search_program([kernel], _everywhere(Profile((alone,), 1)), HOST_TARGET, serial)
    heavy = search_program([kernel], _everywhere(Profile((fused,), 1)), HOST_TARGET, serial)
    assert heavy.ranked[0].predicted == pytest.approx(light.ranked[0].predicted + extra)
    assert heavy.default_predicted == pytest.approx(light.default_predicted + extra)


def test_a_fused_updates_bytes_cost_what_the_host_measured():
    # Calibrated, every byte beyond the kernel's (the transposed ones too: their walk across
    # rows is priced on top) at `fused_cost` times L2's rate, shared among the cores; a Zen 3
    # VM's in-order updates took 3.6-7.8x their bytes' time at that rate.
    from sft.cost.model import parallel_speedup

    kernel = Kernel(0, (256, 1024, 8), ("m", "n", "k"), 4, ())
    own = (256 * 8 + 8 * 1024 + 256 * 1024) * 4
    desc = dataclasses.replace(HOST, fused_cost=5.0)
    for transposed in (0, 1 << 20):
        fused = Dispatch(0, "matmul_256x1024x8_f32", kernel.domain, own + (3 << 20), None,
                         transposed_bytes=transposed)
        for cores in (1, 2):
            assert fused_seconds(fused, kernel, desc, cores) == pytest.approx(
                (3 << 20) * 5.0 / desc.l2_bandwidth / parallel_speedup(cores, desc))
    assert fused_seconds(Dispatch(0, "matmul_256x1024x8_f32", kernel.domain, own, None), kernel, desc, 1) == 0.0


def test_a_transposed_updates_body_ops_are_priced_beside_its_bytes():
    # The same transposed bytes with an SGD-momentum body (4 ops a point) and an AdamW one
    # (15): the bytes at `transposed_cost` times L2's rate, each op at `transposed_op_seconds`.
    from sft.cost.model import parallel_speedup, transposed_seconds

    desc = dataclasses.replace(HOST, transposed_cost=3.0, transposed_op_seconds=1e-9)
    name, moved, points = "matmul_256x1024x8_f32", 4 << 20, 256 * 1024
    sgd, adamw = (Profile((Dispatch(0, name, (256, 1024, 8), moved, None, transposed_bytes=moved,
                                    transposed_work=ops * points),), 1) for ops in (4, 15))
    for cores in (1, 2):
        streamed = moved * 3.0 / desc.l2_bandwidth
        assert transposed_seconds(sgd, desc, cores) == pytest.approx(
            (streamed + 4 * points * 1e-9) / parallel_speedup(cores, desc))
        assert transposed_seconds(adamw, desc, cores) - transposed_seconds(sgd, desc, cores) == pytest.approx(
            11 * points * 1e-9 / parallel_speedup(cores, desc))
    unpriced = dataclasses.replace(desc, transposed_op_seconds=0.0)  # never calibrated: bytes alone
    assert transposed_seconds(adamw, unpriced, 1) == transposed_seconds(sgd, unpriced, 1)


def test_a_weight_held_k_by_n_whose_rows_share_l1s_sets_is_read_again_from_l2():
    # x @ W with W held [256, 1024] f32: its rows 4 KiB apart fall in the same L1 sets, so its
    # panel is gone before the next register block reads it (32x1024x256 on one Zen 4 core:
    # 191 us where its FMAs take 145); 1040 floats apart they spread over the sets.
    plain = tuple(f"affine_map<{m}>" for m in ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)",
                                               "(d0, d1, d2) -> (d0, d1)"))
    desc = dataclasses.replace(HOST, l1_bytes=32 << 10, l1_ways=8,  # whatever this host's L1
                               cpu=dataclasses.replace(HOST.cpu, overlap=0.5))
    ways = dataclasses.replace(desc, l1_ways=1 << 12)  # as if every row had a set of its own
    for n, aliased in ((1024, True), (1040, False)):
        kernel = Kernel(0, (32, n, 256), ("m", "n", "k"), 4, plain)
        rows = tile_space(kernel, isa=host_isa()).candidates
        rows = rows[rows[:, 0] > rows[:, 2]]  # blocks that walk a panel more than once
        shared, own = predict(kernel, rows, desc, 1), predict(kernel, rows, ways, 1)
        assert (shared >= own).all()
        assert (shared > own).any() == aliased


def test_a_data_tiled_contraction_runs_at_the_measured_rate_of_its_smallest_extent():
    # Read on 256^3 and on a K = 8 matmul (FLOP/s a core); between them, in the log of the
    # smallest extent; on two cores at the parallel efficiency; IREE's default where unmeasured.
    from sft.cost.model import data_tiled_seconds

    desc = dataclasses.replace(HOST, data_tiling_rate=60e9, data_tiling_thin_rate=10e9,
                               data_tiling_ukernel_rate=70e9, data_tiling_ukernel_thin_rate=5e9,
                               parallel_efficiency=0.5)
    dt, uk = ModuleOptions(data_tiling=True), ModuleOptions(data_tiling=True, ukernels=True)
    square = Kernel(0, (256, 256, 256), ("m", "n", "k"), 4, ())
    thin = Kernel(0, (256, 1024, 8), ("m", "n", "k"), 4, ())
    between = Kernel(0, (4, 32, 768, 192), ("b", "m", "n", "k"), 4, ())
    assert between.flops == 2 * 4 * 32 * 768 * 192
    assert data_tiled_seconds(square, dt, desc, 1, 1.0) == pytest.approx(square.flops / 60e9)
    assert data_tiled_seconds(square, uk, desc, 2, 1.0) == pytest.approx(square.flops / 70e9 / 1.5)
    assert data_tiled_seconds(thin, uk, desc, 1, 1.0) == pytest.approx(thin.flops / 5e9)
    assert data_tiled_seconds(between, dt, desc, 1, 1.0) == pytest.approx(between.flops / (10e9 + 50e9 * 0.4))
    # not data tiled, or never measured: IREE's default code's time
    assert data_tiled_seconds(thin, ModuleOptions(), desc, 1, 0.123) == 0.123
    assert data_tiled_seconds(thin, dt, HOST, 1, 0.123) == 0.123
    one_rate = dataclasses.replace(desc, data_tiling_thin_rate=0.0)
    assert data_tiled_seconds(thin, dt, one_rate, 1, 1.0) == pytest.approx(thin.flops / 60e9)


def test_a_relayout_dispatch_costs_more_than_streaming_its_bytes():
    from sft.cost.model import memory_bound

    pack = Dispatch(0, "encode_256x1024xf32_to_256x1024xf32", (256, 1024), 2 << 20, None)
    copy = Dispatch(0, "elementwise_256x1024_f32", (256, 1024), 2 << 20, None)
    assert pack.is_relayout and not copy.is_relayout
    for cost in (HOST.relayout_cost, 1.6):  # the default, and one sft-calibrate measured
        desc = dataclasses.replace(HOST, relayout_cost=cost)
        assert memory_bound(pack, desc, 1) == pytest.approx(cost * memory_bound(copy, desc, 1))


def test_bytes_stream_at_the_rate_of_the_cache_they_fit():
    """L2's rate where a dispatch's bytes fit the cores' L2, the last-level cache's where they
    fit there and its rate was measured, DRAM's beyond it (or where it was not measured)."""
    desc = dataclasses.replace(HOST, l2_bytes=1 << 20, l2_bandwidth=100e9, dram_bandwidth=20e9,
                               last_level_bytes=32 << 20, last_level_bandwidth=80e9,
                               parallel_efficiency=1.0)
    assert bandwidth(1 << 20, desc, 1) == 100e9 and bandwidth(2 << 20, desc, 2) == 200e9
    assert bandwidth(4 << 20, desc, 1) == 80e9
    assert bandwidth(64 << 20, desc, 1) == 20e9
    assert bandwidth(32 << 20, desc, 1) == 20e9  # the whole last level: other data shares it
    assert bandwidth(4 << 20, dataclasses.replace(desc, last_level_bandwidth=0.0), 1) == 20e9


def test_a_kernels_operands_come_from_the_last_level_cache_where_they_fit():
    """Beyond L2, a kernel's operands stream at the last-level cache's measured rate where they
    fit in half of it (a program called in a loop finds them there), else at DRAM's."""
    # its 16 MiB result outgrows L2, and streaming it outlasts its 34 MFLOP on any ISA
    thin = Kernel(0, (2048, 2048, 4), ("m", "n", "k"), 4, ())
    llc = dataclasses.replace(HOST, l2_bytes=1 << 20, last_level_bytes=64 << 20,
                              last_level_bandwidth=80e9, dram_bandwidth=20e9)
    default = np.zeros((1, 5), int)
    in_llc = predict(thin, default, llc, 1)[0]
    from_dram = predict(thin, default, dataclasses.replace(llc, last_level_bandwidth=0.0), 1)[0]
    beyond = predict(thin, default, dataclasses.replace(llc, last_level_bytes=4 << 20), 1)[0]
    assert in_llc < from_dram and beyond == pytest.approx(from_dram)


def test_an_untiled_contraction_is_priced_by_its_vector_tiles_accumulators():
    """A contraction the search does not tile (a convolution) runs at the share of peak its
    IREE vector tile allows: its parallel elements fill vectors of the ISA's lanes, and fewer
    vectors than the FMA latency times the issue rate leave the FMA units waiting."""
    from sft.cost.model import UNTILED_EFFICIENCY, memory_bound, untiled_efficiency

    desc = dataclasses.replace(HOST, simd_f32=16,
                               cpu=dataclasses.replace(HOST.cpu, fma_latency=4.0, fma_per_cycle=2.0))
    conv = lambda vector: Dispatch(0, "conv_3x16x3x3x8x32x32_f32", (3, 16, 3, 3, 8, 32, 32), 1 << 16,  # noqa: E731
                                   ((1, 8, 1, 3, 0, 0, 0), vector, (0, 0, 0, 0, 1, 1, 16)))
    filter_gradient, wide = conv((1, 1, 1, 4, 0, 0, 0)), conv((1, 16, 1, 8, 0, 0, 0))
    assert untiled_efficiency(filter_gradient, desc) == pytest.approx(0.25 / 8)  # a quarter vector, one chain
    assert untiled_efficiency(wide, desc) == pytest.approx(1.0)  # 8 vectors: the 4 x 2 in flight
    assert untiled_efficiency(conv((1, 1, 1, 24, 0, 0, 0)), desc) == pytest.approx(0.75 * 2 / 8)
    assert untiled_efficiency(Dispatch(0, "conv_4x4_f32", (4, 4), 64, None), desc) == UNTILED_EFFICIENCY
    assert memory_bound(filter_gradient, desc, 1) == pytest.approx(32 * memory_bound(wide, desc, 1))


def test_iree_defaults_prediction_is_of_the_program_as_written():
    """Every plan of a CNN training step computes its filter gradients as matmuls (sft-im2col);
    IREE's default compiles the program as written, convolutions and all, and is predicted so
    (on the rewritten program's view instead, the step's default read 0.70 ms where it took
    2.98 and the plans 1.0-1.3)."""
    from sft.passes.hold_transposed import fixed_state
    from sft.search.strategy import _default_predicted, search_plan
    from sft.tools.bench_quality_programs import program_of

    program = program_of("cnn")
    _, report = search_plan(program.sft_text, HOST_TARGET, fixed=fixed_state(program.signature))
    assert report.im2col  # the rewrite every plan has
    as_written = _default_predicted(program.sft_text, list(HOST_TARGET.options), HOST_TARGET)
    rewritten = next(o.predicted for o in report.ranked if o.options.is_default)
    assert report.default_predicted == pytest.approx(as_written)
    assert as_written != pytest.approx(rewritten, rel=1e-3)


def test_search_weighs_driver_overheads_against_parallelism():
    # One tiny dispatch: the parallel executor's wake-up dominates, so inline (serial) wins; a
    # large matmul on a target whose second core really helps goes parallel.
    tiny = Profile((Dispatch(0, "elementwise_8x256_f32", (8, 256), 16384, None),), 1)
    target = dataclasses.replace(HOST_TARGET, desc=dataclasses.replace(
        HOST, invoke_overhead=50e-6, serial_invoke_overhead=2e-6, parallel_efficiency=0.9))
    options = cpu_option_space()
    report = search_program([], _everywhere(tiny), target, options)
    assert report.ranked[0].options.serial
    big = Kernel(0, (1024, 1024, 1024), ("m", "n", "k"), 4, ())
    one = Profile((Dispatch(0, "matmul_1024x1024x1024_f32", big.domain, 3 << 22, None),), 1)
    report = search_program([big], _everywhere(one), target, options)
    assert not report.ranked[0].options.serial
    assert len(report.ranked) == len(options) == 16  # 12, and 4 with im2col (no data tiling)


def test_option_space_keeps_the_default_first():
    # IREE's default partition, layout and driver first; every CPU set reassociates reductions
    assert cpu_option_space()[0] == ModuleOptions(reassociate=True) and cpu_option_space()[0].is_default
    assert all(REASSOCIATE in o.flags for o in cpu_option_space())
    assert get_target("cuda:sm_80").options == (ModuleOptions(),)
    assert ModuleOptions(data_tiling=True).flags and not ModuleOptions(data_tiling=True).keeps_tiles
    assert ModuleOptions(serial=True).driver == "local-sync"
    assert "--iree-global-opt-use-im2col-for-convs" in ModuleOptions(im2col=True).formation_flags


def test_searched_plans_reassociate_reductions_and_keep_numerics():
    # Batch norm's per-channel statistics: sums across the batch and the pixels, which IREE's
    # CPU code adds one term at a time unless told it may reorder them. Every searched plan on
    # a CPU tells it (whatever the trust gate keeps); IREE's default plan does not.
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)).train()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 3 + 1
    expected = model(x).detach().numpy()
    none = sft.compile(model, (x,), search="none")
    searched = sft.compile(model, (x,), search="model")
    assert REASSOCIATE not in none.plan.flags and REASSOCIATE in searched.plan.flags
    for compiled in (none, searched):
        got = compiled(x).numpy()
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(8, 32, 32, 16), (6, 5, 7, 3)])
def test_searched_plans_split_channels_last_sums_and_keep_numerics(shape):
    # JAX's batch norm on NHWC activations: per-channel sums over batch and pixels, the
    # channels innermost. Every searched plan on a CPU splits them (`passes.split_reduction`);
    # IREE's default plan does not; the values are jax.jit's either way (the terms reordered).
    import jax
    import jax.numpy as jnp

    def statistics(x):
        mean = jnp.mean(x, axis=(0, 1, 2))
        return mean, jnp.mean(jnp.square(x - mean), axis=(0, 1, 2)), jnp.sum(x, axis=(1, 2))

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3 + 1
    expected = jax.jit(statistics)(x)
    none = sft.compile(statistics, (x,), search="none")
    searched = sft.compile(statistics, (x,), search="model")
    assert none.plan.split == () and len(searched.plan.split) == 2  # not the per-image sum
    assert "split sums" in searched.search.chosen
    for compiled in (none, searched):
        for got, want in zip(compiled(x), expected):
            got, want = np.asarray(got), np.asarray(want)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_sum_that_would_split_only_narrowly_stays_as_written():
    import jax.numpy as jnp

    # 2 x 67 rows of 3: the only split rows are 6 wide, too narrow to pay for the fold
    narrow = np.random.default_rng(0).standard_normal((2, 67, 1, 3)).astype(np.float32)
    searched = sft.compile(lambda x: jnp.sum(x, axis=(0, 1, 2)), (narrow,), search="model")
    assert searched.plan.split == ()
    np.testing.assert_allclose(np.asarray(searched(narrow)), narrow.sum((0, 1, 2)), rtol=1e-5,
                               atol=1e-5)


def test_verify_takes_the_least_asking_plan_within_noise_reassociated_if_any():
    from sft.measure import least_asking

    reassociated = cpu_option_space()[0].flags
    plans = {"iree-default": sft.Plan(), "parallel": sft.Plan(flags=reassociated),
             "fused": sft.Plan(flags=ModuleOptions(fusion=True, reassociate=True).flags),
             "local-sync": sft.Plan(flags=reassociated, driver="local-sync")}
    within = {"iree-default": 1.00, "parallel": 1.01, "fused": 0.99, "local-sync": 0.90}
    # the fastest on the parallel driver is the fused plan; the reassociated default asks no more
    assert least_asking({k: v for k, v in within.items() if k != "local-sync"}, plans, "fused") == "parallel"
    assert least_asking(within, plans, "local-sync") == "local-sync"  # alone on its driver
    beyond = {"iree-default": 1.00, "parallel": 1.10, "fused": 0.90}
    assert least_asking(beyond, plans, "fused") == "fused"  # a gain past the noise is taken


def test_verify_times_the_graph_rewrites_predicted_close_to_the_pick():
    from sft.search.candidates import REWRITE_SPREAD, program_candidates
    from sft.search.exhaustive import OptionChoice, SearchReport

    best = cpu_option_space()[0]
    other = next(o for o in cpu_option_space() if o.driver != best.driver)  # the other executor
    report = SearchReport(ranked=[OptionChoice(best, 1.0, ()), OptionChoice(other, 1.2, ())])
    report.rewrites = {"as written": 1.0, "oriented [3]": REWRITE_SPREAD - 0.01, "expanded [7]": 1.5,
                       "held [0]": 1.0}
    report.rewrite_ops = {"as written": ((), (), ()), "oriented [3]": ((3,), (), ()),
                          "expanded [7]": ((), (7,), ()), "held [0]": ((), (), (0,))}
    found = program_candidates(report)
    for o in (best, other):  # under the best options of each driver
        assert found[f"{o.describe()} oriented [3]"] == sft.Plan(orient=(3,), flags=o.flags,
                                                                 driver=o.driver)
        assert found[f"{o.describe()} held [0]"] == sft.Plan(held=(0,), flags=o.flags, driver=o.driver)
        assert found[o.describe()] == sft.Plan(flags=o.flags, driver=o.driver)  # as written: once
    assert not any("expanded" in name for name in found)  # predicted far slower


def test_model_and_verify_search_keep_numerics(monkeypatch):
    import sft.measure

    together = []  # verify's candidates, timed side by side in shared processes
    real = sft.measure.time_together
    monkeypatch.setattr(sft.measure, "time_together",
                        lambda builders, *a, **k: together.append(set(builders)) or real(builders, *a, **k))
    case = SUITE["linear"]
    model, inputs = case.build(), case.inputs()
    with torch.no_grad():
        expected = model(*inputs).numpy()
    for mode in ("model", "verify"):
        compiled = sft.compile(model, inputs, search=mode)
        assert compiled.search is not None and compiled.search.scored > 100
        np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    measured = compiled.search.measured
    assert measured["program iree-default"] is not None  # IREE's default timed beside the rest
    named = {k.removeprefix("program ") for k in measured if k.startswith("program ")}
    assert len(together) == 1 and together[0] <= named and "iree-default" in together[0]
    # option sets that change nothing in one matmul (aggressive fusion) compile to the module
    # of another candidate: timed once, each name given that time
    shared = named - together[0]
    assert shared and all(measured[f"program {n}"] in {measured[f"program {t}"] for t in together[0]}
                          for n in shared)
    kernel = compiled.search.choices[0].kernel
    # the kernel alone, under IREE's default and the candidates, measured (none failed here)
    assert measured[f"op {kernel.op_id} candidate 0"] is not None
    assert compiled.search.chosen


def test_unknown_search_mode_is_an_error():
    case = SUITE["relu"]
    with pytest.raises(sft.SftError, match="search must be"):
        sft.compile(case.build(), case.inputs(), search="fast")


@pytest.mark.parametrize("cpu", ["host", "haswell", "znver3", "skylake-avx512"])
def test_profile_reads_iree_dispatches_and_default_configs(cpu):
    """On every host form of IREE's CPU config (AVX2 adds a cache_parallel level first)."""
    from sft.backend import profile
    from sft.decisions.cpu_tiles import row_of_iree

    case = SUITE["mlp"]
    text = sft.api.linalg_of(case.build(), case.inputs())[0]
    seen = profile(text, HOST_TARGET, flags=(f"--iree-llvmcpu-target-cpu={cpu}",))
    assert seen.dispatch_count == 2
    first = seen.contraction((32, 1024, 256))
    assert first is not None and first.flops == 2 * 32 * 1024 * 256
    assert first.config is not None, "IREE's default config was not read"
    kernel = Kernel(0, (32, 1024, 256), ("m", "n", "k"), 4, ())
    dm, dn, vm, vn, vk = row_of_iree(kernel.roles, first.config)
    dist, par, red = first.config
    assert (dm, dn, vm, vn, vk) == (dist[0], dist[1], par[0], par[1], red[2])
    assert all(x > 0 for x in (dm, dn, vm, vn, vk))


def test_profile_reads_packed_dispatches_and_their_packs():
    """Under data tiling IREE's view holds its packs and unpacks (relayouts, counted among the
    dispatches) and its packed contractions (`mmt4d`), each read as the matmul it computes
    (its extents padded to the inner tile: what a kernel's `domain` finds)."""
    from sft.backend import profile
    from sft.space.options import DATA_TILING

    case = SUITE["mlp"]
    text = sft.api.linalg_of(case.build(), case.inputs())[0]
    packed = profile(text, HOST_TARGET, flags=(DATA_TILING,))
    matmuls = [d for d in packed.dispatches if d.is_contraction]
    assert len(matmuls) == 2 and all(d.packed and d.inner for d in matmuls)
    assert packed.contraction((32, 1024, 256)) is not None
    assert packed.contraction((32, 256, 1024)) is not None
    assert packed.contraction((32, 1024, 256)).flops >= 2 * 32 * 1024 * 256
    packs = [d for d in packed.dispatches if d.is_relayout]
    assert packs and packed.dispatch_count == len(packed.dispatches)
    assert not any(d.packed for d in profile(text, HOST_TARGET).dispatches)


def test_a_packed_contraction_is_read_as_its_padded_matmul():
    """`mmt4d_2x64x256x16x16x1` is a 32x1024x256 matmul, or one of 17-32 rows: either kernel
    finds it."""
    from sft.backend.profile import Dispatch, Profile

    d = Dispatch(0, "mmt4d_2x64x256x16x16x1_f32", (32, 1024, 256), 0, None, packed=True,
                 inner=(16, 16, 1))
    seen = Profile((d,), 1)
    assert seen.contraction((32, 1024, 256)) == d == seen.contraction((17, 1024, 256))
    assert seen.contraction((16, 1024, 256)) is None and seen.contraction((33, 1024, 256)) is None


def test_profiles_resumed_from_one_global_optimization_are_the_profiles(tmp_path, monkeypatch):
    """Profiles of one text under formation flags alike in their global-opt flags (aggressive
    fusion acts later; data tiling packs in global optimization) resume from one run of it per
    kind, and read what a compile from the start reads: the same dispatches, buffers and
    default configs."""
    from sft.backend import iree
    from sft.space.options import AGGRESSIVE_FUSION, DATA_TILING

    case = SUITE["mlp"]
    text = sft.api.linalg_of(case.build(), case.inputs())[0]
    flag_sets = [(), (AGGRESSIVE_FUSION,), (DATA_TILING,), (AGGRESSIVE_FUSION, DATA_TILING)]
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path / "whole"))
    whole = [iree.profile(text, HOST_TARGET, flags) for flags in flag_sets]
    runs = []
    real = iree._run_compile
    monkeypatch.setattr(iree, "_run_compile", lambda args, timeout=None: (runs.append(args), real(args, timeout)))
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path / "resumed"))
    resumed = iree.profiles([(text, flags) for flags in flag_sets], HOST_TARGET, workers=2)
    assert [p.to_json() for p in resumed] == [p.to_json() for p in whole]
    optimized = [a for a in runs if "--compile-to=global-optimization" in a]
    assert len(optimized) == 2 and sum(DATA_TILING in a for a in optimized) == 1
    assert sum("--compile-from=global-optimization" in a for a in runs) == len(flag_sets) == len(runs) - 2
    runs.clear()
    assert [p.to_json() for p in iree.profiles([(text, ())], HOST_TARGET)] == [whole[0].to_json()]
    assert runs == []  # cached: nothing compiled again


@pytest.mark.parametrize("body, expected", [
    ("cache_parallel = [32, 64, 0], distribution = [32, 64, 0], vector_common_parallel = [8, 8, 0], "
     "vector_reduction = [0, 0, 8]", ((32, 64, 0), (8, 8, 0), (0, 0, 8))),
    ("distribution = [32, 64, 0], vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]",
     ((32, 64, 0), (8, 16, 0), (0, 0, 16))),
    ("tile_sizes = [[64, 64, 0], [8, 32, 0], [0, 0, 4]]", ((64, 64, 0), (8, 32, 0), (0, 0, 4))),
    ("cache_parallel = [32, 64], vector_common_parallel = [8, 8]", None),  # an elementwise op's
    ("{mma_kind = #iree_gpu.mma_layout<MFMA_F32_16x16x16_F16>, promote_operands = [0, 1], "
     "reduction = [0, 0, 8], subgroup = [2, 4, 0], workgroup = [64, 128, 0]}", None),
])
def test_lowering_configs_are_read_structurally(body, expected):
    from sft.backend.profile import parse_lowering_config
    from sft.decisions.cpu_tiles import levels_of_iree

    fields = parse_lowering_config(body)
    assert levels_of_iree(fields) == expected
    if "workgroup" in body:
        assert fields["workgroup"] == (64, 128, 0) and fields["mma_kind"].startswith("#iree_gpu")


def test_quality_metrics_on_a_hand_made_ranking():
    from sft.quality import KernelQuality, summarize

    # predicted order 0 < 1 < 2 < 3; measured order 1 < 0 < 2 < 3: one pair of six is wrong.
    q = KernelQuality(MATMUL, [0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 3.0, 4.0])
    assert q.pairs() == (5, 6)
    assert not q.recall(1) and q.recall(2)
    assert q.regret() == pytest.approx(2.0)
    assert q.spearman() == pytest.approx(0.8)
    # a 1% difference is noise: that pair is not counted
    assert KernelQuality(MATMUL, [0, 1], [1.0, 2.0], [1.01, 1.0]).pairs() == (0, 0)
    s = summarize([q])
    assert s["pairwise_accuracy"] == pytest.approx(5 / 6) and s["candidates"] == 4
    # each candidate's own noise (its driver's control): a pair needs the larger of its two
    from sft.quality import ordered_pairs
    assert ordered_pairs([1.0, 2.0, 3.0], [1.2, 1.0, 2.0]) == (2, 3)
    assert ordered_pairs([1.0, 2.0, 3.0], [1.2, 1.0, 2.0], [0.3, 0.0, 0.0]) == (2, 2)


def test_kernels_take_the_layout_iree_compiles():
    from sft.space.kernels import in_layout

    k = Kernel(0, (8, 16, 32), ("m", "n", "k"), 4,
               ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"))
    assert not k.b_transposed
    t = in_layout(k, ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)"))
    assert t.b_transposed and t.key() != k.key()
    steps = tile_space(t).candidates[1:, 4]
    assert (steps % host_isa().lanes_f32 == 0).all()  # whole-vector reduction steps only
    assert in_layout(k, ("(d0, d1, d2) -> (d0, d1)",) * 3) == k  # other loops: kept as it is
    cands = np.array([[8, 16, 1, 16, 4], [8, 16, 8, 16, 4]])
    plain, transposed = predict(k, cands, SIMPLE), predict(t, cands, SIMPLE)
    assert transposed[0] > plain[0] and transposed[1] > plain[1]  # the transpose costs both
    # Per k, a 1-row block is latency-bound plain (4 cycles) and shuffle-bound transposed (4
    # shuffles + half of 1 load cycle and 0.5 FMA cycle = 4.75); an 8-row one goes from 4.5 +
    # 0.5 * 4 = 6.5 to 4.5 + 0.5 * (4 + 4) = 8.5: the shuffles hide under a latency-bound
    # block's chain, and add to an FMA-bound one's ports. With 8 (1-row) or 1 (8-row) blocks
    # of 32 k and 8 steps of 0.5 cycles, and half of the L2 traffic exposed (3584 B at 32 B a
    # cycle, halved: 56 cycles):
    assert transposed[0] / plain[0] == pytest.approx((8 * (32 * 4.75 + 4) + 56) / (8 * (32 * 4 + 4) + 56))
    assert transposed[1] / plain[1] == pytest.approx((32 * 8.5 + 4 + 56) / (32 * 6.5 + 4 + 56))


def test_verify_keeps_the_default_unless_the_gain_is_beyond_noise():
    from sft.measure import _significant_best

    assert _significant_best({0: 1.00, 1: 0.99}, 0) == 0      # 1%: noise
    assert _significant_best({0: 1.00, 1: 0.90}, 0) == 1      # 10%: real
    assert _significant_best({1: 0.90, 2: 0.80}, 0) == 2      # default failed: the fastest


def test_option_sets_iree_cannot_profile_are_dropped_not_fatal(tmp_path, monkeypatch):
    """IREE's aggressive fusion fails on training graphs: its option sets leave the search."""
    from iree.compiler.tools.binaries import find_tool

    fake = tmp_path / "iree-compile"
    fake.write_text(f"""#!/bin/sh
for a in "$@"; do [ "$a" = "--iree-dispatch-creation-enable-aggressive-fusion" ] && exit 1; done
exec {find_tool("iree-compile")} "$@"
""")
    fake.chmod(0o755)
    monkeypatch.setenv("SFT_IREE_COMPILE", str(fake))
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path / "cache"))
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU()), torch.randn(4, 16)
    compiled = sft.compile(model, (x,), search="model")
    described = [o.options.describe() for o in compiled.search.ranked]
    assert described and not any("aggressive-fusion" in d for d in described)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_plan_that_does_not_compile_falls_back_to_the_next_ranked(tmp_path, monkeypatch):
    """The model's pick failing in iree-compile (aggressive fusion past IREE's stack limit on a
    training step, here an unknown flag) costs the pick, not the search: another ranked option
    set compiles, is reported, and is what the database replays."""
    import sft.search.strategy as strategy

    real = strategy.search_plan

    def failing_pick(*args, **kwargs):
        plan, report = real(*args, **kwargs)
        return dataclasses.replace(plan, flags=(*plan.flags, "--iree-no-such-flag")), report

    monkeypatch.setattr(strategy, "search_plan", failing_pick)
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path / "cache"))
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU()), torch.randn(4, 16)
    compiled = sft.compile(model, (x,), search="model")
    report = compiled.search
    assert report.fallback and "failed to compile" in report.chosen
    assert "--iree-no-such-flag" not in compiled.plan.flags and compiled.plan.tiles == ()
    ranked = [sft.Plan(flags=o.options.flags, driver=o.options.driver) for o in report.ranked]
    assert compiled.plan in ranked
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    again = sft.compile(model, (x,), search="model")
    assert again.search.replayed and again.plan == compiled.plan


def _tiles_taken(choice):
    """`choice` with its best-ranked candidate other than IREE's default (0) ranked first
    (as it is where it has none: IREE's config alone)."""
    first = next((i for i, c in enumerate(choice.ranked) if c != 0), 0)
    order = [first, *(i for i in range(len(choice.ranked)) if i != first)]
    return dataclasses.replace(choice, ranked=tuple(choice.ranked[i] for i in order),
                               predicted=tuple(choice.predicted[i] for i in order))


def test_a_pick_whose_fusion_fails_falls_back_to_the_next_option_set_with_its_tiles():
    """Where the pick's dispatch formation fails (aggressive fusion past IREE's stack limit on
    a training step), the pick is tried untiled, then the option sets without that formation,
    each with its own searched tiles first, then untiled."""
    from sft.program import prepare
    from sft.search.compile import _fallbacks
    from sft.search.strategy import option_plan, search_plan
    from sft.space.options import FORMATION_FLAGS

    program = prepare(sft.models.MLP().eval(), (torch.randn(32, 256),))[0]
    host = get_target("host")
    believing = dataclasses.replace(host, trust=Trust(tuple((k, 1.0) for k in KINDS), "test"))
    _, report = search_plan(program.sft_text, believing)
    # every option set as if the model had taken its kernels' next-best tiles over IREE's
    # (which it does or not depending on the host's ISA: the fallback rule is what is tested)
    report.ranked = [dataclasses.replace(o, kernels=tuple(map(_tiles_taken, o.kernels)))
                     for o in report.ranked]
    fused = next(o for o in report.ranked if o.options.formation_flags and o.options.keeps_tiles)
    failed = option_plan(report, fused)
    default_predicted, report.default_predicted = report.default_predicted, float("inf")
    found = _fallbacks(report, failed, believing)  # (every option set taken over the default)
    formed = [plan for _, plan in found if set(fused.options.formation_flags) <= set(plan.flags)]
    assert formed == [dataclasses.replace(failed, tiles=())]  # the failed set itself, untiled
    tiled = [(name, plan) for name, plan in found if plan.tiles]
    assert tiled and tiled[0][0].endswith("its tiles")
    option = next(o for o in report.ranked if o.options.describe() == tiled[0][0].removesuffix(", its tiles"))
    assert tiled[0][1] == option_plan(report, option)
    assert set(fused.options.formation_flags) <= set(FORMATION_FLAGS)
    # the trust gate holds for the fallbacks too: where it takes no option set over IREE's
    # default, only the failed pick untiled is tried before IREE's default itself
    report.default_predicted = default_predicted
    taken = {o.options.describe() for o in report.ranked if o.predicted < default_predicted}
    assert all(name.removesuffix(", its tiles") in taken | {fused.options.describe()}
               for name, _ in _fallbacks(report, failed, believing))
    doubting = dataclasses.replace(host, trust=Trust(tuple((k, 1e6) for k in KINDS), "test"))
    assert _fallbacks(report, failed, doubting) == [(fused.options.describe(),
                                                      dataclasses.replace(failed, tiles=()))]


def test_a_plan_that_does_not_apply_falls_back_like_one_iree_refuses(tmp_path, monkeypatch):
    """A searched plan naming an op the program does not have (IllegalPlan while lowering) is
    discarded as a pick iree-compile refuses is: the next ranked option set compiles."""
    import sft.search.strategy as strategy

    real = strategy.search_plan

    def stale_pick(*args, **kwargs):
        plan, report = real(*args, **kwargs)
        return dataclasses.replace(plan, tiles=((99, TileConfig((8, 8, 0), (8, 8, 0), (0, 0, 8))),)), report

    monkeypatch.setattr(strategy, "search_plan", stale_pick)
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path / "cache"))
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU()), torch.randn(4, 16)
    compiled = sft.compile(model, (x,), search="model")
    assert compiled.search.fallback and "op 99" in compiled.search.chosen
    assert compiled.plan.tiles == ()
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_im2col_is_searched_where_a_program_has_convolutions():
    """im2col's option sets (and their IREE profiles) only for a program with a convolution;
    verify times the best of them beside the rest."""
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    plain = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU())
    x_conv, x_plain = torch.randn(2, 3, 10, 10), torch.randn(4, 16)
    ranked = lambda model, x: [o.options for o in sft.compile(model, (x,), search="model").search.ranked]
    assert any(o.im2col for o in ranked(conv, x_conv))
    assert not any(o.im2col for o in ranked(plain, x_plain))
    compiled = sft.compile(conv, (x_conv,), search="verify")
    assert any("im2col" in name for name in compiled.search.measured)
    torch.testing.assert_close(compiled(x_conv), conv(x_conv), rtol=1e-4, atol=1e-5)


def test_contractions_of_one_shape_keep_their_own_layouts():
    """Two 32x1024x256 matmuls, one reading its B across rows through a transpose (JAX's
    dY @ W^T): each is searched in the layout it is read in, and matched to IREE's dispatch of
    that layout, not to the first of those extents (which gave the transposed one a tile
    vectorised along n: 1062 against 231 us)."""
    pytest.importorskip("jax")
    from sft.backend import profile
    from sft.plan import Plan
    from sft.program import lower, prepare, to_sft
    from sft.search.exhaustive import as_compiled
    from sft.space.kernels import contraction_kernels

    def two(x, w1, y, w2):
        return x @ w1, y @ w2.T

    f32 = np.float32
    args = (np.ones((32, 256), f32), np.ones((256, 1024), f32), np.ones((32, 256), f32),
            np.ones((1024, 256), f32))
    program = prepare(two, args)[0]
    kernels = contraction_kernels(to_sft(program.sft_text))
    assert [k.domain for k in kernels] == [(32, 1024, 256)] * 2
    assert sorted(k.b_transposed for k in kernels) == [False, True]
    seen = profile(lower(to_sft(program.sft_text), Plan(), HOST_TARGET)[1], HOST_TARGET)
    compiled, defaults = as_compiled(kernels, seen, HOST_TARGET)
    assert [k.b_transposed for k in compiled] == [k.b_transposed for k in kernels]
    report = search_program(kernels, _everywhere(seen), HOST_TARGET, [ModuleOptions()])
    chosen = {c.kernel.b_transposed: c.space.candidates[c.best] for c in report.ranked[0].kernels
              if c.best}
    if True in chosen:  # a transposed B is never vectorised wider than one vector along n
        assert chosen[True][3] <= HOST.simd_f32


def test_wrapping_sft_ops_imports_nothing():
    # The bindings look for a Python module of the sft dialect's op classes each time they wrap
    # an sft op; a failed import each time was 1.6 s of a GPT-2 small search (sft/ir.py).
    import sys

    from sft.passes.common import compute_ops
    from sft.program import prepare, to_sft

    model = SUITE["mlp"]
    module = to_sft(prepare(model.build(), model.inputs())[0].sft_text)
    looked_up = []

    class Spy:
        def find_spec(self, name, path=None, target=None):
            looked_up.append(name)

    sys.meta_path.insert(0, Spy())
    try:
        ops = compute_ops(module)
    finally:
        sys.meta_path.remove(sys.meta_path[0])
    assert ops and not looked_up, looked_up[:3]
