"""`torch.compile(model, backend="sft")`: Dynamo's graphs, AOTAutograd's forward and backward,
compiled by sft and checked against eager PyTorch, with the optimizer the user's own."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sft  # noqa: F401  (the backend is found through its entry point)
from sft.models import MLP


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _close(a, b, rtol=1e-4):
    a, b = a.detach(), b.detach()
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    np.testing.assert_allclose(a.double().numpy(), b.double().numpy(), rtol=rtol,
                               atol=1e-5 * max(b.abs().max().item(), 1e-3))


def test_inference_matches_eager_and_a_new_shape_compiles_again():
    torch.manual_seed(0)
    model = MLP((32, 64, 10)).eval()
    compiled = torch.compile(model, backend="sft")
    for batch in (8, 3):  # the last, smaller batch: compiled for its own shape, no eager fallback
        x = torch.randn(batch, 32)
        with torch.no_grad(), warnings_as_errors():
            _close(compiled(x), model(x))


class warnings_as_errors:
    """sft's 'runs eager' warnings fail the test: every graph here must be compiled."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.filterwarnings("error", message="sft:")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)


def test_a_training_loop_with_schedule_clipping_and_accumulation_matches_eager():
    """The optimizer, the schedule, clipping and gradient accumulation are the user's eager code:
    only forward and backward are sft's, so they work by construction."""
    torch.manual_seed(0)
    model = MLP((32, 64, 10))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="sft")

    def loop(net, params):
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / 2))
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(3):
            for _ in range(2):  # accumulation over two micro-batches
                x, y = torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
                loss = F.cross_entropy(net(x), y) / 2
                loss.backward()
                losses.append(loss.item())
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            opt.zero_grad()
            sched.step()
        return losses

    with warnings_as_errors():
        got = loop(compiled, list(model.parameters()))
    want = loop(ref, list(ref.parameters()))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        _close(p, q)


class _Breaks(torch.nn.Module):
    """A forward with a graph break (a Python value read from a tensor) between two graphs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum().item() > 0:  # data-dependent Python: Dynamo breaks the graph here
            h = h * 2
        return self.b(h)


def test_graph_breaks_run_and_match_eager():
    torch.manual_seed(0)
    model = _Breaks().eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        _close(torch.compile(model, backend="sft")(x), model(x))


def test_search_option_and_integer_outputs():
    def fn(x, w):
        y = torch.tanh(x @ w)
        return y, y.argmax(-1), (y > 0).to(torch.uint8)

    x, w = torch.randn(8, 16), torch.randn(16, 5)
    got = torch.compile(fn, backend="sft", options={"search": "model"})(x, w)
    want = fn(x, w)
    _close(got[0], want[0])
    for a, b in zip(got[1:], want[1:]):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)


def test_train_mode_dropout_runs_eager_with_a_warning_never_one_fixed_mask():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()
    compiled = torch.compile(model, backend="sft")
    x = torch.ones(64, 8)
    with pytest.warns(UserWarning, match="random numbers"):
        first = compiled(x)
    assert not torch.equal(first, compiled(x))  # a new mask each call, as eager draws


def test_unknown_options_are_refused():
    with pytest.raises(Exception, match="unknown option 'tiles'"):
        torch.compile(torch.nn.Linear(2, 2), backend="sft", options={"tiles": 1})(torch.ones(1, 2))
