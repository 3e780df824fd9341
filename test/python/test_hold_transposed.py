"""Parameters held transposed on the device (`passes/hold_transposed.py`): nn.Linear's weights
taken [in, out] by the module, transposed once at upload and back when read; the results,
`state_dict` and `load_state_dict` as eager's, and the search offering it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import sft
from sft.errors import SftError
from sft.passes.hold_transposed import fixed_state, holdable
from sft.plan import Plan
from sft.program import prepare


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    # a square weight too: a missed transpose there would give wrong values, not a shape error
    return nn.Sequential(nn.Linear(48, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 16)).eval()


def test_held_weights_give_eager_values_and_come_back_as_the_user_has_them():
    model, x = _mlp(0), torch.randn(8, 48)
    program = prepare(model, (x,))[0]
    # the weights, not the biases (vectors) and not the input (not state)
    assert holdable(program.module(), fixed_state(program.signature)) == (0, 2, 4)
    compiled = sft.compile(model, (x,), plan=Plan(held=(0, 2, 4)))
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    state = compiled.state_dict()
    for name, value in model.state_dict().items():
        assert state[name].shape == value.shape and torch.equal(state[name], value), name
    other = _mlp(1)  # new weights through load_state_dict: held the same way
    compiled.load_state_dict(other.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), other(x).numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(compiled.state_dict()["2.weight"], other.state_dict()["2.weight"])


def test_a_plan_cannot_hold_an_input_or_what_only_a_transpose_does_not_read():
    model, x = _mlp(0), torch.randn(8, 48)
    with pytest.raises(SftError, match="argument 6 transposed, which is not a matrix"):
        sft.compile(model, (x,), plan=Plan(held=(6,)))  # the input, after the 6 state tensors
    with pytest.raises(SftError, match="argument 1 transposed, which is not a matrix"):
        sft.compile(model, (x,), plan=Plan(held=(1,)))  # a bias

    class TransposedInput(nn.Module):  # an input read only through a transpose: holdable IR,
        def __init__(self):            # but a call's input is not uploaded once
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 4))

        def forward(self, x):
            return x.t() @ self.w

    with pytest.raises(SftError, match="only state that no call replaces"):
        sft.compile(TransposedInput().eval(), (torch.randn(8, 16),), plan=Plan(held=(1,)))


def test_the_search_weighs_holding_the_weights_and_keeps_eager_values():
    model, x = _mlp(0), torch.randn(8, 48)
    compiled = sft.compile(model, (x,), search="model")
    report = compiled.search
    assert any(name.startswith("held [0, 2, 4]") for name in report.rewrites), report.rewrites
    assert compiled.plan.held in ((), (0, 2, 4))  # whichever the model predicts faster here
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_training_steps_weights_are_not_held():
    model, batch = _mlp(0).train(), (torch.randn(8, 48), torch.randn(8, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = sft.compile_train_step(model, nn.MSELoss(), optimizer, batch)
    assert fixed_state(step.compiled.signature) == ()  # every parameter is replaced each step
    # (the update reads the weight as it is: no transposes only)
    with pytest.raises(SftError, match="argument 0 transposed"):
        sft.compile_train_step(model, nn.MSELoss(), optimizer, batch, plan=Plan(held=(0,)))
