"""Every bundled model compiles through sft and matches PyTorch eager; raise+lower is faithful."""

import numpy as np
import pytest
import torch

import sft
from sft.program import lower, prepare
from sft.backend import compile_module, load
from sft.models import SUITE
from sft.plan import Plan
from sft.targets import get_target


def _reference(case):
    model, inputs = case.build(), case.inputs()
    with torch.no_grad():
        return model, inputs, model(*inputs).numpy()


@pytest.mark.parametrize("name", list(SUITE))
def test_model_matches_eager_and_raises_fully(name):
    model, inputs, expected = _reference(SUITE[name])
    compiled = sft.compile(model, inputs)
    assert compiled.opaque_ops == 0, f"{name} left ops opaque"
    got = compiled(*inputs)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(SUITE))
def test_raise_lower_keeps_dispatches_and_numbers(name):
    """IREE compiles sft-opt --sft-raise --sft-lower output as it compiles the original."""
    model, inputs, _ = _reference(SUITE[name])
    program, module = prepare(model, inputs)
    host = get_target("host")
    lowered, planned = lower(module, Plan(), host)
    original, roundtrip = compile_module(program.linalg, host), compile_module(planned, host)
    assert roundtrip.dispatch_count == original.dispatch_count
    arrays = [*program.state.values(), *(x.numpy() for x in inputs)]
    a, b = load(original)(*arrays)[0], load(roundtrip)(*arrays)[0]
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def test_stages_are_kept_on_request():
    case = SUITE["linear"]
    compiled = sft.compile(case.build(), case.inputs(), keep_ir=True)
    assert "linalg.matmul" in compiled.stages.linalg
    assert '"sft.contract"' in compiled.stages.sft
    assert "linalg.matmul" in compiled.stages.lowered and "sft." not in compiled.stages.planned.split("{-#")[0]
    assert compiled.dispatch_count == 1
