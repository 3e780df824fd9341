"""Weights held packed on the device (`passes/hold_packed.py`): nn.Linear's weights taken in
panels of n0 columns and multiplied by mmt4d; packed once at upload and back when read; the
results, `state_dict` and `load_state_dict` as eager's, alone and split across cores, and
verify timing the plans that hold weights again with them packed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import sft
from sft.errors import SftError
from sft.passes.hold_packed import UKERNELS_OFF, block_of, packed_twin
from sft.passes.hold_transposed import held_array, user_array
from sft.plan import Plan
from sft.space.options import DATA_TILING
from sft.program import lower, prepare
from sft.targets import get_target


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    # a square weight too: a panel read from the wrong place would give wrong values, not a
    # shape error
    return nn.Sequential(nn.Linear(48, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 32)).eval()


PACKED = Plan(held=(0, 2, 4), packed=((0, 8, 32), (2, 8, 16), (4, 4, 32)), driver="local-sync")


def _check(compiled, model, x):
    with torch.no_grad():
        expected = model(x)
    got = compiled(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_packed_weights_give_eager_values_and_come_back_as_the_user_has_them():
    model, x = _mlp(0), torch.randn(20, 48)  # 20 rows: the last block of 8 padded
    compiled = sft.compile(model, (x,), plan=PACKED)
    assert UKERNELS_OFF in compiled.plan.iree_flags
    _check(compiled, model, x)
    state = compiled.state_dict()
    for name, value in model.state_dict().items():
        assert state[name].shape == value.shape and torch.equal(state[name], value), name
    other = _mlp(1)  # new weights through load_state_dict: packed the same way
    compiled.load_state_dict(other.state_dict())
    _check(compiled, other, x)
    assert torch.equal(compiled.state_dict()["2.weight"], other.state_dict()["2.weight"])


def test_packed_weights_split_across_cores_give_eager_values():
    model, x = _mlp(0), torch.randn(16, 48)
    # the first layer's outputs (its weight's rows, whole panels of 32) and the second's inputs
    plan = Plan(weight_split=(2, 0, 0, 1, 0, 2, 1), held=(0, 2), packed=((0, 8, 16), (2, 8, 32)),
                driver="local-sync")
    compiled = sft.compile(model, (x,), plan=plan)
    _check(compiled, model, x)
    _check(compiled, model, torch.randn(16, 48))
    other = _mlp(2)
    compiled.load_state_dict(other.state_dict())
    _check(compiled, other, x)
    for name, value in other.state_dict().items():
        np.testing.assert_array_equal(compiled.state_dict()[name].numpy(), value.numpy())


def test_attentions_packed_projections_give_eager_values():
    from sft.models import MultiheadSelfAttention

    torch.manual_seed(0)
    model, x = MultiheadSelfAttention().eval(), torch.randn(2, 32, 128)
    # the input projection: a batch matmul of its weight's broadcast; the output's: a matmul
    compiled = sft.compile(model, (x,), plan=Plan(held=(0, 2), packed=((0, 8, 32), (2, 8, 32))))
    _check(compiled, model, x)
    for name, value in model.state_dict().items():
        assert torch.equal(compiled.state_dict()[name], value), name


def test_a_plan_packs_only_held_weights_in_whole_panels():
    model, x = _mlp(0), torch.randn(8, 48)
    with pytest.raises(SftError, match=r"argument 2 packed in 8x32 blocks: it is not a matrix \(held"):
        sft.compile(model, (x,), plan=Plan(held=(0,), packed=((2, 8, 32),)))
    with pytest.raises(SftError, match="argument 4 packed in 8x64 blocks"):  # 32 columns
        sft.compile(model, (x,), plan=Plan(held=(4,), packed=((4, 8, 64),)))
    with pytest.raises(SftError, match="argument 1 transposed"):  # a bias: never held
        sft.compile(model, (x,), plan=Plan(held=(1,), packed=((1, 8, 32),)))


def test_a_packed_plan_reads_back_from_json_and_packing_inverts():
    assert Plan.from_json(PACKED.to_json()) == PACKED
    with pytest.raises(SftError, match="packed must be a list of"):
        Plan.from_json('{"packed": [[0, 8]]}')
    weight = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)  # as torch holds it: [N, K]
    packed = held_array(weight, 32)
    assert packed.shape == (2, 48, 32, 1)
    assert packed[1, 5, 3, 0] == weight[32 + 3, 5]  # panel 1, k 5, column 3 of the panel
    np.testing.assert_array_equal(user_array(packed, 32), weight)


def test_verify_times_plans_that_hold_weights_again_packed(monkeypatch):
    import sft.passes.hold_packed as hold_packed

    monkeypatch.setattr(hold_packed, "TWIN_MIN_FLOPS", 0)  # (this model's products are small)
    host = get_target("host")
    m0, n0 = block_of(host.desc)
    assert m0 == 8 and n0 % host.desc.simd_f32 == 0
    model, x = _mlp(0), torch.randn(8, 48)
    program = prepare(model, (x,))[0]

    def lowered(plan):
        return lambda: lower(program.module(), plan, host)[1]

    held = Plan(held=(0, 2, 4), driver="local-sync")
    twin = packed_twin(held, host, lowered(held))  # the last layer's 32 columns: not whole panels
    assert {a for a, _, _ in twin.packed} == {a for a, n in ((0, 64), (2, 64), (4, 32)) if n % n0 == 0}
    assert all((bm, bn) == (m0, n0) for _, bm, bn in twin.packed)
    _check(sft.compile(model, (x,), plan=twin), model, x)
    for plan in (Plan(), Plan(held=(0,), flags=(DATA_TILING,)), twin):
        assert packed_twin(plan, host, lowered(plan)) is None  # holds none, packs itself, is packed
    assert packed_twin(held, get_target("cuda:sm_80"), lowered(held)) is None  # CPU codegen only


def test_the_model_packs_weights_only_where_the_host_measured_a_gain():
    import dataclasses

    from sft.cost.trust import KINDS, Trust
    from sft.models import MLP
    from sft.passes.hold_transposed import fixed_state
    from sft.search.strategy import search_plan

    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(32, 256)  # 256-1024-256
    program = prepare(model, (x,))[0]
    host = get_target("host")
    believing = Trust(tuple((k, 1.0) for k in KINDS), "test")

    def searched(speedup):
        desc = dataclasses.replace(host.desc, packed_speedup=speedup)
        target = dataclasses.replace(host, desc=desc, trust=believing)
        return search_plan(program.sft_text, target, fixed=fixed_state(program.signature))

    plan, report = searched(1.0)  # never calibrated: nothing packed
    assert plan.packed == () and set(report.packed_reads) == {0, 2}
    # a host that measured a large gain (3x: larger than any tile config the model predicts
    # over IREE's, on any ISA): both layers packed
    plan, report = searched(3.0)
    assert [a for a, _, _ in plan.packed] == [0, 2] and "held packed" in report.chosen
    # the two layers' matmuls are the ones priced packed
    assert sorted(op for ops in report.packed_reads.values() for op in ops) == sorted(
        c.kernel.op_id for c in report.ranked[0].kernels)
    _check(sft.compile(model, (x,), plan=plan), model, x)


def test_the_model_prices_a_splits_parts_packed_too():
    # Each part of a split holds its weights too: the model prices the part's plan with them
    # packed beside the plain one (verify times both), and the packed split runs as eager.
    import dataclasses

    from sft.cost.trust import KINDS, Trust
    from sft.models import MLP
    from sft.search.strategy import split_search

    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(32, 256)
    program = prepare(model, (x,))[0]
    host = get_target("host")
    desc = dataclasses.replace(host.desc, packed_speedup=3.0, cores=2)  # splits offered on any host
    target = dataclasses.replace(host, desc=desc, trust=Trust(tuple((k, 1.0) for k in KINDS), "test"))
    found = split_search(program, target)
    packed = [pick for pick in found if pick.plan.packed]
    assert packed and all(pick.name.endswith(", packed") for pick in packed)
    faster = []
    for pick in packed:  # the same split, plain: never predicted faster
        plain = next(p for p in found if p.name == pick.name.removesuffix(", packed"))
        assert (plain.plan.batch_split, plain.plan.weight_split) == (pick.plan.batch_split,
                                                                      pick.plan.weight_split)
        assert pick.predicted <= plain.predicted and not plain.plan.packed
        faster.append(pick.predicted < plain.predicted)
    # (a batch split's price can be the weights each part reads whole, which packing leaves)
    assert any(faster)
    _check(sft.compile(model, (x,), plan=packed[0].plan), model, x)
