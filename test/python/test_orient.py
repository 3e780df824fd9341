"""sft-orient on real training steps: JAX's autodiff writes each weight gradient as a
contraction and a transpose; computed in the transposed layout, the step gives jax.jit's values,
IREE's dispatches no longer walk the weight update across rows, and the search weighs it."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import sft  # noqa: E402
from sft.api import linalg_of  # noqa: E402
from sft.backend import profile  # noqa: E402
from sft.errors import SftError  # noqa: E402
from sft.passes.orient import orientable  # noqa: E402
from sft.plan import Plan  # noqa: E402
from sft.program import lower, to_sft  # noqa: E402
from sft.targets import get_target  # noqa: E402


def _momentum_step():
    """An MLP step with SGD momentum, weights stored [in, out] as JAX users write them."""
    rng = np.random.default_rng(0)
    params = {"w0": rng.standard_normal((64, 128)).astype(np.float32) * 0.1,
              "w1": rng.standard_normal((128, 64)).astype(np.float32) * 0.1}
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    x = rng.standard_normal((16, 64)).astype(np.float32)
    y = rng.standard_normal((16, 64)).astype(np.float32)

    def step(params, velocity, x, y):
        def loss(p):
            return jnp.mean(jnp.square(jnp.tanh(x @ p["w0"]) @ p["w1"] - y))

        value, grads = jax.value_and_grad(loss)(params)
        velocity = jax.tree_util.tree_map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree_util.tree_map(lambda p, v: p - 0.05 * v, params, velocity)
        return value, params, velocity

    return step, (params, velocity, x, y)


@pytest.fixture(scope="module")
def written():
    """The step, its arguments, its sft program as written and the contractions to orient."""
    step, args = _momentum_step()
    text = sft.compile(step, args, keep_ir=True).stages.sft
    return step, args, text, orientable(to_sft(text))


def test_oriented_step_matches_jax_and_drops_the_transposed_updates(written):
    step, args, text, ids = written
    assert len(ids) == 2  # both weight gradients: a contraction and a transpose each
    target = get_target("host")
    transposed = [sum(d.transposed_bytes for d in profile(lower(to_sft(text), plan, target)[1],
                                                          target).dispatches)
                  for plan in (Plan(), Plan(orient=ids))]
    # as written: both updates (weight and velocity read, both written: 64x128 f32 each) walked
    # across rows; oriented, what is left is one [16, 128] activation read into a gradient
    assert transposed[0] == 2 * 4 * 64 * 128 * 4 and transposed[1] < transposed[0] / 16
    oriented = sft.compile(step, args, plan=Plan(orient=ids))
    reference = jax.jit(step)
    ours, theirs = args[:2], args[:2]
    for _ in range(3):
        our_loss, *ours = oriented(*ours, *args[2:])
        their_loss, *theirs = reference(*theirs, *args[2:])
        np.testing.assert_allclose(float(our_loss), float(their_loss), rtol=1e-5)
    for got, want in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        assert np.asarray(got).shape == np.asarray(want).shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_the_search_weighs_orientation(written):
    step, args, _, ids = written
    compiled = sft.compile(step, args, search="model")
    names = set(compiled.search.rewrites)
    assert "as written" in names and f"oriented {list(ids)}" in names
    assert compiled.plan.orient in ((), ids)
    assert compiled.search.to_dict()["orient"] == list(compiled.plan.orient)


def test_a_contraction_read_untransposed_is_not_orientable():
    import torch

    model = torch.nn.Linear(16, 8)
    text = linalg_of(model, (torch.randn(4, 16),))[0]
    assert orientable(to_sft(text)) == ()
    with pytest.raises(SftError, match="plan orients op 0, which is not a contraction read only"):
        sft.compile(model, (torch.randn(4, 16),), plan=Plan(orient=(0,)))
