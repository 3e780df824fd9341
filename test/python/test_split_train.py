"""A training step's batch split in parts side by side (`Plan.batch_split` on a program that
sums over its batch: `passes/split_join.py`): each part sums its own rows' gradients and loss,
the join functions add the parts' partials and update the state; checked step after step
against PyTorch eager and jax.jit from the same start (losses, parameters, optimizer state)."""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn as nn

import sft
from sft.api import prepare
from sft.plan import Plan


def _two_cores(target):
    return dataclasses.replace(target, desc=dataclasses.replace(target.desc, cores=2))


def _mlp_and_adamw():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _batches(count, rows=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, 16, generator=g), torch.randn(rows, 8, generator=g)) for _ in range(count)]


def test_a_split_training_step_matches_eager_step_after_step():
    model, opt = _mlp_and_adamw()
    reference, ref_opt = _mlp_and_adamw()
    batches = _batches(3)
    state = len([*model.parameters()]) * 3 + 1  # parameters, AdamW's two moments each, the step
    step = sft.compile_train_step(model, nn.functional.mse_loss, opt, batches[0],
                                  plan=Plan(batch_split=(2, state, state + 1), driver="local-sync"))
    layout = step.compiled.split_layout
    # the loss and four gradients summed by each part; the update in two join functions
    assert layout.sums == 5 and len(layout.join_entries) == 2
    for x, y in batches:
        loss = step(x, y)
        ref_opt.zero_grad()
        want = nn.functional.mse_loss(reference(x), y)
        want.backward()
        ref_opt.step()
        assert loss.shape == () and loss.dtype == torch.float32
        torch.testing.assert_close(loss, want.detach(), rtol=1e-5, atol=1e-6)
    step.sync()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
        for slot in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[got][slot], ref_opt.state[want][slot], rtol=1e-5, atol=1e-7)


def test_the_search_offers_a_split_step_and_refuses_a_cross_entropy_one():
    """A mean-squared error sums over its rows; cross-entropy's mean divides by the count of
    labels not ignored, itself a sum over the batch, before the backward reads each row: the
    parts' gradients would be scaled by their own counts, so it is refused, saying why."""
    from sft.importers.torch_train import trace_train_step
    from sft.program import program_from
    from sft.search.batch_split import batch_split_of
    from sft.targets import get_target

    two = _two_cores(get_target("host"))
    model, opt = _mlp_and_adamw()
    x, y = _batches(1)[0]
    graph = trace_train_step(model, nn.functional.mse_loss, opt, (x, y))
    program, _ = program_from(graph.linalg, "mse", graph.signature, graph.state)
    first = len(program.signature.state)
    assert batch_split_of(program, two) == (2, first, first + 1)
    labels = torch.randint(0, 8, (8,))
    graph = trace_train_step(model, nn.functional.cross_entropy, opt, (x, labels))
    program, _ = program_from(graph.linalg, "ce", graph.signature, graph.state)
    assert batch_split_of(program, two) == ()
    first = len(program.signature.state)
    with pytest.raises(sft.SftError, match="reads a sum over the batch and the batch itself"):
        sft.compile_train_step(model, nn.functional.cross_entropy, opt, (x, labels),
                               plan=Plan(batch_split=(2, first, first + 1), driver="local-sync"))


def test_a_split_jax_step_with_donated_state_matches_jax_jit():
    import jax
    import jax.numpy as jnp

    from sft.search.batch_split import batch_split_of
    from sft.targets import get_target

    def step(params, momentum, x, y):
        def loss_of(p):
            return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_of)(params)
        momentum = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, momentum, grads)
        params = jax.tree_util.tree_map(lambda p, m: p - 0.05 * m, params, momentum)
        return loss, params, momentum

    rng = np.random.default_rng(0)
    params = {"b": jnp.zeros(8, jnp.float32),
              "w": jnp.asarray(rng.standard_normal((16, 8)) * 0.3, jnp.float32)}
    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)
    data = [(jnp.asarray(rng.standard_normal((8, 16)), jnp.float32),
             jnp.asarray(rng.standard_normal((8, 8)), jnp.float32)) for _ in range(3)]
    program, _ = prepare(step, (params, momentum, *data[0]), donate_argnums=(0, 1))
    split = batch_split_of(program, _two_cores(get_target("host")))
    assert split == (2, 4, 5)  # x and y, not the bias and its momentum (8 long as well)
    compiled = sft.compile(step, (params, momentum, *data[0]), donate_argnums=(0, 1),
                           plan=Plan(batch_split=split, driver="local-sync"))
    assert compiled.split_layout.sums == 3  # the loss, w's and b's gradients
    reference = jax.jit(step)
    mine, theirs = (params, momentum), (params, momentum)
    for x, y in data:
        loss, *mine = compiled(*mine, x, y)
        want, *theirs = reference(*theirs, x, y)
        assert np.shape(loss) == () and np.asarray(loss).dtype == np.float32
        np.testing.assert_allclose(np.asarray(loss), np.asarray(want), rtol=1e-5, atol=1e-6)
    for got, want in zip(jax.tree_util.tree_leaves(mine), jax.tree_util.tree_leaves(theirs)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_gather_of_each_rows_own_element_splits():
    """A body that reads its batch loop's index to pick from its own row of the batch (each
    row's label, as cross-entropy's forward does) reads the same rows in a part."""
    class Picked(nn.Module):
        def forward(self, logits, labels):
            return torch.gather(logits.log_softmax(-1), 1, labels[:, None])[:, 0] * 2.0

    model = Picked()
    logits, labels = torch.randn(6, 10), torch.randint(0, 10, (6,))
    compiled = sft.compile(model, (logits, labels), plan=Plan(batch_split=(2, 0, 1), driver="local-sync"))
    for _ in range(2):
        logits, labels = torch.randn(6, 10), torch.randint(0, 10, (6,))
        got, want = compiled(logits, labels), model(logits, labels)
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_split_step_follows_a_schedulers_learning_rate_and_refuses_dropout():
    """The hyper-parameters are inputs of the join functions, read at every call (a scheduler
    acts at once); train-mode dropout's mask is drawn per element of the whole batch (a
    batch-sized value no part can take its share of): not split, saying why."""
    model, opt = _mlp_and_adamw()
    reference, ref_opt = _mlp_and_adamw()
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ref_schedule = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.5)
    batches = _batches(3)
    state = len([*model.parameters()]) * 3 + 1
    step = sft.compile_train_step(model, nn.functional.mse_loss, opt, batches[0],
                                  plan=Plan(batch_split=(2, state, state + 1), driver="local-sync"))
    for x, y in batches:
        step(x, y)
        schedule.step()
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        ref_schedule.step()
    step.sync()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    from sft.importers.torch_train import trace_train_step

    torch.manual_seed(0)
    dropped = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 8)).train()
    sgd = torch.optim.SGD(dropped.parameters(), lr=0.1)
    first = len(trace_train_step(dropped, nn.functional.mse_loss, sgd, batches[0]).signature.state)
    with pytest.raises(sft.SftError, match="cannot split this program's batch: an op reads its "
                                           "batch loop from a value that is not split"):
        sft.compile_train_step(dropped, nn.functional.mse_loss, sgd, batches[0],
                               plan=Plan(batch_split=(2, first, first + 1), driver="local-sync"))
