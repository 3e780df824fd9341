"""A split of the weights in parts side by side (`Plan.weight_split`): a layer's outputs and the
next layer's inputs cut among the parts (Megatron's column and row split), each part holding its
share of the parameters and summing its share of the second layer, a join adding the partial
sums and what follows; checked against PyTorch eager on real inputs (values, dtypes, shapes)."""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn as nn

import sft
from sft.api import prepare
from sft.models import MLP
from sft.plan import Plan
from sft.search.batch_split import weight_split_of
from sft.targets import get_target


def _two_cores(target):
    return dataclasses.replace(target, desc=dataclasses.replace(target.desc, cores=2))


def _check(compiled, model, x):
    with torch.no_grad():
        expected = model(x)
    got = compiled(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_the_mlp_is_split_along_its_hidden_dim_and_matches_eager():
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(6, 256)
    program, _ = prepare(model, (x,))
    split = weight_split_of(program, _two_cores(get_target("host")))
    # net.0.weight [1024, 256] at dim 0, its bias, net.2.weight [256, 1024] at dim 1
    assert split == (2, 0, 0, 1, 0, 2, 1)
    compiled = sft.compile(model, (x,), plan=Plan(weight_split=split, driver="local-sync"))
    layout = compiled.split_layout
    assert layout.sums == 1 and layout.joins == (None,) and layout.join_args == (3,)  # the last bias
    _check(compiled, model, x)
    _check(compiled, model, torch.randn(6, 256))  # a second call: the shares kept
    # new weights reach every part's share; state_dict gives them whole, as the user has them
    with torch.no_grad():
        model.net[0].weight.mul_(-0.5)
        model.net[2].weight.add_(0.25)
    compiled.load_state_dict(model.state_dict())
    _check(compiled, model, x)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(compiled.state_dict()[name].numpy(), value.numpy())


@pytest.mark.parametrize("processes", [True, False])
def test_the_searched_split_holds_its_shares_transposed_on_threads_and_in_processes(monkeypatch, processes):
    import sft.backend.parts as parts
    from sft.search.strategy import split_search

    monkeypatch.setattr(parts, "USE_PROCESSES", processes)
    torch.manual_seed(1)
    model, x = MLP().eval(), torch.randn(8, 256)
    program, _ = prepare(model, (x,))
    picks = [p for p in split_search(program, _two_cores(get_target("host"))) if p.plan.weight_split]
    assert picks and all(p.predicted > 0 and p.layout.join_args == (3,) for p in picks)
    plan = picks[0].plan
    assert set(plan.held) <= {0, 2}  # only what the parts take cut: the join reads the bias as it is
    compiled = sft.compile(model, (x,), plan=plan)
    assert bool(compiled._device()._helpers) == processes
    _check(compiled, model, x)
    # the helper's partial sums are lent to the join from shared memory that the next call
    # rewrites: a result kept from one call (numpy in, numpy out: no copy into torch) stays
    first = compiled(x.numpy())
    kept = first.copy()
    compiled(np.random.default_rng(0).standard_normal((8, 256), np.float32))
    np.testing.assert_array_equal(first, kept)


@pytest.mark.parametrize("name, model, updates", [
    # layer norm over the hidden dim applies its sum back to the cut values
    ("layer norm between", nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256), nn.Linear(256, 64)).eval(), False),
    # batch norm in train mode updates its running statistics: state, which a weight split never takes
    ("state updated", nn.Sequential(nn.Linear(64, 256), nn.BatchNorm1d(256), nn.Linear(256, 64)).train(), True),
])
def test_no_weight_split_is_offered_where_the_proof_refuses_it(name, model, updates):
    from sft.values import updated_results

    program, _ = prepare(model, (torch.randn(4, 64),))
    assert bool(updated_results(program.signature)) == updates
    assert weight_split_of(program, _two_cores(get_target("host"))) == ()


def test_one_core_offers_no_weight_split_and_a_plan_cannot_split_both():
    target = get_target("host")
    one = dataclasses.replace(target, desc=dataclasses.replace(target.desc, cores=1))
    model, x = MLP().eval(), torch.randn(4, 256)
    assert weight_split_of(prepare(model, (x,))[0], one) == ()
    with pytest.raises(sft.SftError, match="a plan splits its batch or its weights, not both"):
        sft.compile(model, (x,), plan=Plan(batch_split=(2, 4), weight_split=(2, 0, 0, 1, 0, 2, 1),
                                           driver="local-sync"))
    with pytest.raises(sft.SftError, match=r"weight_split must be \[parts, argument, dim"):
        Plan.from_json('{"weight_split": [2, 0]}')


def _call_in_child(compiled, x, results):
    results.put(compiled(x).numpy())


def test_a_forked_child_runs_the_split_with_helpers_of_its_own():
    """A DataLoader worker, forked after the split model ran in its parent: the parent's
    helper process is not the child's (the registry is per process), so the child starts its
    own and loads the module and its shares there; the parent's helper keeps serving the
    parent."""
    import multiprocessing

    torch.manual_seed(2)
    model, x = MLP().eval(), torch.randn(4, 256)
    program, _ = prepare(model, (x,))
    split = weight_split_of(program, _two_cores(get_target("host")))
    compiled = sft.compile(model, (x,), plan=Plan(weight_split=split, driver="local-sync"))
    _check(compiled, model, x)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_call_in_child, args=(compiled, x, results))
    child.start()
    try:
        got = results.get(timeout=120)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)
    _check(compiled, model, x)  # the parent's own helper still serves it


class _SharedExtent(nn.Module):
    """A vocabulary as long as the feed-forward's hidden layer (GPT-2's block: 512 and 512):
    cutting every parameter of that extent fails the proof; the feed-forward's alone does not."""

    def __init__(self, vocab=256, dim=32):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)
        self.fc, self.out = nn.Linear(dim, vocab), nn.Linear(vocab, dim)

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(h + self.out(torch.nn.functional.gelu(self.fc(h))))


@pytest.mark.parametrize("name, make, example, expected", [
    # not the embedding nor the head, though as long
    ("shared extent", _SharedExtent, lambda: torch.randint(0, 256, (4, 8)),
     {"fc.weight": 0, "fc.bias": 0, "out.weight": 1}),
    # a square middle weight (256 x 256), cut along the dim the proof asks for: its inputs
    ("square middle layer", lambda: MLP((64, 256, 256, 64)), lambda: torch.randn(4, 64),
     {"net.0.weight": 0, "net.0.bias": 0, "net.2.weight": 1}),
])
def test_the_cut_grows_from_one_weight_by_what_the_proof_needs_cut_too(name, make, example, expected):
    torch.manual_seed(3)
    model, x = make().eval(), example()
    program, _ = prepare(model, (x,))
    names = [n for n, _, _ in program.signature.state]
    split = weight_split_of(program, _two_cores(get_target("host")))
    assert {names[a]: d for a, d in zip(split[1::2], split[2::2])} == expected
    compiled = sft.compile(model, (x,), plan=Plan(weight_split=split, driver="local-sync"))
    with torch.no_grad():
        expected = model(x)
    got = compiled(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_a_split_that_cannot_beat_the_pick_is_not_searched():
    """search="model" searches a split's part only where the split's least possible prediction
    (`split_floor`: the whole's best on one thread shared among the parts, plus the split's
    own cost), trusted as its kind is, could beat the whole program's pick."""
    from sft.cost.trust import Trust
    from sft.passes.hold_transposed import fixed_state
    from sft.passes.split_batch import split_layout, split_of
    from sft.search.batch_split import shared_seconds, split_floor
    from sft.search.strategy import search_plan, split_search

    torch.manual_seed(2)
    model, x = MLP().eval(), torch.randn(8, 256)
    program, _ = prepare(model, (x,))
    target = _two_cores(get_target("host"))
    report = search_plan(program.sft_text, target, "f32", fixed_state(program.signature))[1]
    every = [p for p in split_search(program, target) if p.plan.weight_split]
    assert every
    value = every[0].plan.weight_split
    split = split_of(Plan(weight_split=value))
    floor = split_floor(report.serial_floor, value[0], shared_seconds(program, split, target),
                        split_layout(program.module(), split))
    assert 0 < floor <= min(p.predicted for p in every)  # a floor, on this program
    # a trust the floor already fails: nothing searched; one it passes: the same picks
    trust = lambda factor: Trust(tuple({**dict(target.trust.factors), "weights": factor}.items()))  # noqa: E731
    doubting, believing = (trust(f * report.pick_predicted / floor) for f in (1.01, 0.99))
    assert not [p for p in split_search(program, dataclasses.replace(target, trust=doubting), whole=report)
                if p.plan.weight_split]
    kept = split_search(program, dataclasses.replace(target, trust=believing), whole=report)
    assert [p.plan for p in kept if p.plan.weight_split] == [p.plan for p in every]
