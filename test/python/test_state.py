"""A model's state (parameters, buffers) is held by the compiled object, never printed into IR."""

import numpy as np
import pytest
import torch

import sft
from sft.program import prepare


class Rotary(torch.nn.Module):
    """A linear layer with a non-persistent buffer (as rotary embeddings keep theirs) and a
    batch norm (persistent buffers)."""

    def __init__(self, d=16):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.BatchNorm1d(d)
        self.register_buffer("freq", torch.linspace(0.5, 2.0, d), persistent=False)

    def forward(self, x):
        return torch.cos(self.norm(self.proj(x)) * self.freq)


class Counter(torch.nn.Module):
    """Updates a buffer of its own in forward."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1.0)
        return x * self.calls


def _trained(model):
    """The same module with other values in every parameter and saved buffer (what a
    state_dict carries; non-persistent buffers are the module's own)."""
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.rand_like(t) + 0.5)
    return model


def test_no_weight_is_printed_into_the_ir():
    torch.manual_seed(0)
    small, large = torch.nn.Linear(8, 8), torch.nn.Linear(512, 512)
    (p_small, _), (p_large, _) = prepare(small, (torch.randn(2, 8),)), prepare(large, (torch.randn(2, 512),))
    assert "dense<" not in p_large.linalg and "dense_resource" not in p_large.linalg
    assert len(p_large.linalg) < 2 * len(p_small.linalg)  # 262144 weights would be megabytes
    assert list(p_large.state) == ["weight", "bias"]
    np.testing.assert_array_equal(p_large.state["weight"], large.weight.detach().numpy())


def test_the_workload_key_is_the_structure_not_the_weights():
    x = (torch.randn(4, 16),)
    a, _ = prepare(Rotary().eval(), x)
    b, _ = prepare(_trained(Rotary()).eval(), x)
    assert a.workload == b.workload
    assert prepare(torch.nn.Linear(16, 8), x)[0].workload != a.workload


def test_non_persistent_buffers_import_and_match_eager():
    torch.manual_seed(0)
    model, x = _trained(Rotary()).eval(), torch.randn(4, 16)
    compiled = sft.compile(model, (x,), search="model")
    assert "freq" in compiled.state_dict()
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_load_state_dict_swaps_weights_without_compiling_again():
    torch.manual_seed(0)
    first, second, x = Rotary().eval(), _trained(Rotary()).eval(), torch.randn(4, 16)
    compiled = sft.compile(first, (x,))
    artifact = compiled.artifact
    torch.testing.assert_close(compiled(x), first(x), rtol=1e-5, atol=1e-6)
    compiled.load_state_dict(second.state_dict())
    assert compiled.artifact is artifact
    torch.testing.assert_close(compiled(x), second(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled.state_dict()["proj.weight"], second.proj.weight)


def test_load_state_dict_checks_names_shapes_and_dtypes():
    compiled = sft.compile(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    with pytest.raises(sft.SftError, match="unknown names"):
        compiled.load_state_dict({"weights": torch.zeros(2, 4)})
    with pytest.raises(sft.SftError, match=r"'weight' is float32\[4, 2\], the model has float32\[2, 4\]"):
        compiled.load_state_dict({"weight": torch.zeros(4, 2)})
    with pytest.raises(sft.SftError, match="float64"):
        compiled.load_state_dict({"bias": torch.zeros(2, dtype=torch.float64)})


def test_a_buffer_the_model_updates_is_updated_in_the_compiled_state():
    compiled = sft.compile(Counter(), (torch.ones(3),))
    assert torch.equal(compiled(torch.ones(3)), torch.ones(3))
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert compiled.state_dict()["calls"].item() == 2.0
