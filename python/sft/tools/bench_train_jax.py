"""sft-bench train's JAX cases: one jitted training step (jax.value_and_grad of the loss and an
optax update) per model, `step(variables, opt_state, *batch) -> (loss, variables, opt_state)`,
the variables a pytree ({"params": ...}, and flax's "batch_stats" for the CNN).

Variants, each timed in a process of its own (as the torch cases are):
  jax_jit        jax.jit(step) on JAX's CPU backend, outputs blocked on (block_until_ready)
  iree           IREE's own compile of the same StableHLO (jax.jit(step).lower(), IREE's input
                 phase to linalg, iree-compile with the host target; no sft)
  model, verify  sft.compile(step, example_args, search="model" / "verify")

Every variant is called the same way, as a JAX user writes the loop: each step takes the
variables and optimizer state the previous step returned, and they stay on the device:
jax_jit with `donate_argnums=(0, 1)`, sft with the same (its DeviceArrays passed back), iree
with IREE's device arrays passed back (IREE's own donation, `iree.abi.output`, computes wrong
values in IREE 3.13: see `sft.values.aliases`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class JaxTrainCase:
    """A loss over a pytree of variables, its optax optimizer, initial variables and a batch."""

    name: str
    loss: Callable        # (variables, *batch) -> (0-d loss, {collection: new values})
    optimizer: Callable   # () -> optax.GradientTransformation (acts on variables["params"])
    variables: Callable   # () -> pytree of numpy arrays ({"params": ..., ...}), seeded
    batch: Callable       # () -> tuple of numpy arrays (inputs, target), seeded


def _uniform(rng, shape, fan_in):
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def _ce(logits, labels):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# -- MLP: 256 -> 1024 -> GELU -> 256, cross-entropy over 256 classes, SGD with momentum ----------

def _mlp_variables(dims=(256, 1024, 256)):
    rng = np.random.default_rng(0)
    params = {}
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        params[f"w{i}"], params[f"b{i}"] = _uniform(rng, (a, b), a), _uniform(rng, (b,), a)
    return {"params": params}


def _mlp_loss(variables, x, y):
    import jax

    p = variables["params"]
    h = jax.nn.gelu(x @ p["w0"] + p["b0"], approximate=False)  # torch's nn.GELU
    return _ce(h @ p["w1"] + p["b1"], y), {}


def _sgd():
    import optax

    return optax.sgd(0.01, momentum=0.9)


def _adamw():
    import optax

    return optax.adamw(1e-3, weight_decay=0.01)  # torch.optim.AdamW's defaults


def _classes(shape, classes, target_shape):
    def batch():
        rng = np.random.default_rng(1)
        return (rng.standard_normal(shape).astype(np.float32),
                rng.integers(0, classes, target_shape).astype(np.int32))
    return batch


# -- a GPT-2-style block in jax.numpy: embeddings, one pre-norm causal decoder block, the head ---

_GPT = dict(vocab=512, dim=128, heads=4, t=32, b=2)


def _gpt_variables(vocab=_GPT["vocab"], d=_GPT["dim"], t=_GPT["t"]):
    rng = np.random.default_rng(0)
    n = lambda *shape: (rng.standard_normal(shape) * 0.02).astype(np.float32)
    ones, zeros = (lambda k: np.ones(k, np.float32)), (lambda k: np.zeros(k, np.float32))
    return {"params": {
        "tok": n(vocab, d), "pos": n(t, d),
        "ln1_g": ones(d), "ln1_b": zeros(d), "ln2_g": ones(d), "ln2_b": zeros(d),
        "wqkv": _uniform(rng, (d, 3 * d), d), "bqkv": zeros(3 * d),
        "wo": _uniform(rng, (d, d), d), "bo": zeros(d),
        "w1": _uniform(rng, (d, 4 * d), d), "b1": zeros(4 * d),
        "w2": _uniform(rng, (4 * d, d), 4 * d), "b2": zeros(d),
        "lnf_g": ones(d), "lnf_b": zeros(d), "head": _uniform(rng, (d, vocab), d)}}


def _layernorm(x, g, b, eps=1e-5):
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * g + b


def _gpt_loss(variables, idx, target, heads=_GPT["heads"]):
    import jax
    import jax.numpy as jnp

    p = variables["params"]
    b, t = idx.shape
    vocab, d = p["tok"].shape
    # the embedding as a one-hot contraction (its gradient a contraction too, not a scatter)
    x = jax.nn.one_hot(idx, vocab, dtype=jnp.float32) @ p["tok"] + p["pos"][:t]
    h = _layernorm(x, p["ln1_g"], p["ln1_b"])
    q, k, v = jnp.split(h @ p["wqkv"] + p["bqkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(d // heads)
    scores = jnp.where(np.tril(np.ones((t, t), bool)), scores, -1e9)
    attn = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, d)
    x = x + attn @ p["wo"] + p["bo"]
    h = _layernorm(x, p["ln2_g"], p["ln2_b"])
    x = x + jax.nn.gelu(h @ p["w1"] + p["b1"], approximate=False) @ p["w2"] + p["b2"]
    logits = _layernorm(x, p["lnf_g"], p["lnf_b"]) @ p["head"]
    return _ce(logits.reshape(b * t, vocab), target.reshape(b * t)), {}


def _tokens(vocab=_GPT["vocab"], b=_GPT["b"], t=_GPT["t"]):
    rng = np.random.default_rng(1)
    return tuple(rng.integers(0, vocab, (b, t)).astype(np.int32) for _ in range(2))


# -- a flax CNN: the torch case's ConvBlock(3, 16) + Linear(16, 10), NHWC, batch norm training ---

def _flax_cnn():
    import flax.linen as nn
    import jax.numpy as jnp

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            bn = lambda: nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5)
            x = nn.relu(bn()(nn.Conv(16, (3, 3), padding=1)(x)))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = nn.relu(bn()(nn.Conv(16, (3, 3), strides=2, padding=1, use_bias=False)(x)))
            return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))
    return CNN()


def _cnn_variables():
    """flax's structure (traced only: XLA would take seconds to compile its initialisers here),
    values drawn by numpy: uniform(+-1/sqrt(fan_in)) kernels, zero biases, batch norm at 1, 0."""
    import jax

    shapes = jax.eval_shape(_flax_cnn().init, jax.random.key(0),
                            jax.ShapeDtypeStruct((1, 32, 32, 3), np.float32))
    rng = np.random.default_rng(0)

    def value(path, leaf):
        key = jax.tree_util.keystr(path)
        if "scale" in key or "var" in key:
            return np.ones(leaf.shape, np.float32)
        if "mean" in key or "bias" in key:
            return np.zeros(leaf.shape, np.float32)
        return _uniform(rng, leaf.shape, int(np.prod(leaf.shape[:-1])))  # a kernel, HWIO / IO
    return jax.tree_util.tree_map_with_path(value, shapes)


def _cnn_loss(variables, x, y):
    logits, updated = _flax_cnn().apply(variables, x, mutable=["batch_stats"])
    return _ce(logits, y), dict(updated)


JAX_TRAIN_SUITE: dict[str, JaxTrainCase] = {c.name: c for c in [
    *[JaxTrainCase(f"jax_mlp_b{b}", _mlp_loss, _sgd, _mlp_variables,
                   _classes((b, 256), 256, (b,))) for b in (8, 32, 128)],
    JaxTrainCase("jax_gpt2_block", _gpt_loss, _adamw, _gpt_variables, _tokens),
    JaxTrainCase("jax_cnn", _cnn_loss, _sgd, _cnn_variables,
                 _classes((8, 32, 32, 3), 10, (8,))),
]}


def step_of(case: JaxTrainCase):
    """(step, (variables, opt_state, *batch)) for `case`, as numpy pytrees: `step` is the
    training step to jit, its arguments the initial state and the batch."""
    import jax
    import optax

    opt = case.optimizer()

    def step(variables, opt_state, *batch):
        def objective(params):
            return case.loss({**variables, "params": params}, *batch)

        (loss, updated), grads = jax.value_and_grad(objective, has_aux=True)(variables["params"])
        updates, opt_state = opt.update(grads, opt_state, variables["params"])
        params = optax.apply_updates(variables["params"], updates)
        return loss, {**variables, **updated, "params": params}, opt_state

    variables = case.variables()
    opt_state = jax.tree_util.tree_map(np.asarray, opt.init(variables["params"]))
    return step, (variables, opt_state, *case.batch())


# Builders run in the timing worker processes: each returns the callable to time (one step).
def _jax_jit_step(name: str):
    import jax

    step, (variables, opt_state, *batch) = step_of(JAX_TRAIN_SUITE[name])
    jitted = jax.jit(step, donate_argnums=(0, 1))
    state = list(jax.device_put((variables, opt_state)))
    batch = jax.device_put(batch)

    def call():
        loss, state[0], state[1] = jax.block_until_ready(jitted(*state, *batch))
        return loss
    return call


def _iree_step(name: str):
    """IREE alone: the StableHLO jax.jit lowers the step to, through IREE's input phase (as
    sft's JAX front end reads it) and compiled as it is; the state on the device, its new
    values passed back each call."""
    import jax

    from ..backend import compile_module, load
    from ..targets import get_target
    from ..importers.jax import import_jax

    step, args = step_of(JAX_TRAIN_SUITE[name])
    text, signature = import_jax(step, args)
    fn = load(compile_module(text, get_target("host")))
    leaves = [np.asarray(x) for x in signature.flatten(args)]
    n = len(jax.tree_util.tree_leaves(args[:2]))
    state, batch = [fn.upload(x) for x in leaves[:n]], leaves[n:]

    def call():
        loss, *state[:] = fn.call_on_device(*state, *batch)
        return np.asarray(loss.to_host())
    return call


def _sft_step(name: str, search: str):
    from ..api import compile as sft_compile

    step, (variables, opt_state, *batch) = step_of(JAX_TRAIN_SUITE[name])
    compiled = sft_compile(step, (variables, opt_state, *batch), search=search,
                           donate_argnums=(0, 1))  # replays the search done in run_case
    state = [variables, opt_state]

    def call():
        loss, state[0], state[1] = compiled(*state, *batch)
        return loss
    return call


def _matches(case: JaxTrainCase, compiled, steps: int = 3) -> bool:
    """The compiled step's losses against jax.jit's, both from the same start."""
    import jax

    step, (variables, opt_state, *batch) = step_of(case)
    ours = theirs = (variables, opt_state)
    reference = jax.jit(step)
    ok = True
    for _ in range(steps):
        got, *ours = compiled(*ours, *batch)
        want, *theirs = reference(*theirs, *batch)
        ok &= bool(np.isclose(float(got), float(want), rtol=1e-4, atol=1e-6))
    return ok


def run_case(name: str, rounds: int, calls: int, processes: int = 1) -> dict:
    """One JAX case: searched here (model, verify), checked against jax.jit, then every variant
    timed in `processes` processes of its own. Returns its row (medians in `<variant>_s`, ratios)."""
    from ..api import compile as sft_compile
    from ..backend.timing import time_in_processes
    from .bench_ratios import bound_seconds, ratios

    case = JAX_TRAIN_SUITE[name]
    row = {"model": name, "framework": "jax", "ok": True}
    for mode in ("model", "verify"):  # searched here once; the workers replay it
        step, args = step_of(case)
        compiled = sft_compile(step, args, search=mode, donate_argnums=(0, 1), keep_ir=True)
        row["ok"] &= _matches(case, compiled)
        row["bound_s"] = bound_seconds(compiled.stages.linalg)
        row[f"{mode}_plan"] = json.loads(compiled.plan.to_json())
        row[f"{mode}_search"] = compiled.search.to_dict() if compiled.search else {}
        row["dispatches"] = compiled.dispatch_count
    builders = {"jax_jit": (_jax_jit_step, (name,)), "iree": (_iree_step, (name,)),
                "model": (_sft_step, (name, "model")), "verify": (_sft_step, (name, "verify")),
                "iree_again": (_iree_step, (name,))}  # the row's control (`ratios`)
    times, errors = time_in_processes(builders, rounds, calls, timeout=600.0, processes=processes)
    row.update({f"{k}_s": v for k, v in times.items()}, errors=errors)
    ratio = lambda a, b: (times[b] / times[a]) if times.get(a) and times.get(b) else float("nan")
    row.update(ratios(times), verify_over_jax_jit=ratio("verify", "jax_jit"),
               model_over_jax_jit=ratio("model", "jax_jit"))
    return row
