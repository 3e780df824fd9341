"""GPU plans that run: every suite model and a training step compiled for `vulkan:lavapipe`
(Mesa's Vulkan device on the CPU, which `.ci/run` installs) with search="none" and "model",
run through IREE's vulkan driver and compared with eager PyTorch. Without the device these fail,
never skip: CI is meant to have it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sft
from sft.models import SUITE, MLP

TARGET = "vulkan:lavapipe"


def test_the_device_is_here():
    from sft.backend.runtime import check_driver

    check_driver("vulkan")  # an SftError naming the driver where lavapipe is not installed


@pytest.mark.parametrize("search", ["none", "model"])
@pytest.mark.parametrize("name", sorted(SUITE))
def test_suite_model_runs_on_lavapipe_and_matches_eager(name, search):
    case = SUITE[name]
    model, inputs = case.build(), case.inputs()
    got = sft.compile(model, inputs, target=TARGET, search=search)(*inputs)
    want = model(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.double().numpy(), want.detach().double().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_a_training_step_runs_on_lavapipe_and_matches_torch():
    torch.manual_seed(0)
    model = MLP((32, 64, 10))
    ref = MLP((32, 64, 10))
    ref.load_state_dict(model.state_dict())
    make = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)  # noqa: E731
    opt, ref_opt = make(model.parameters()), make(ref.parameters())
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    step = sft.compile_train_step(model, F.cross_entropy, opt, (x, y), target=TARGET)
    for _ in range(3):
        loss = step(x, y)
        want = F.cross_entropy(ref(x), y)
        want.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-4)
    for name, value in ref.state_dict().items():
        np.testing.assert_allclose(step.state_dict()[name].numpy(), value.numpy(), rtol=1e-4, atol=1e-5)
