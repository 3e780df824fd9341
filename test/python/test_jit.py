"""`sft.jit` against `jax.jit`: the same values, dtypes and structures; one compile per
signature; numpy inputs, PRNG keys and unsigned integers taken as JAX takes them; results that
are jax.Arrays anywhere JAX expects one; donation; a flax + optax training loop with a schedule
and global-norm clipping within 1e-5 of jax.jit after 20 steps."""

from __future__ import annotations

import numpy as np
import pytest

import sft
from sft.errors import SftError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import test_jax  # noqa: E402  (its comparison and its models)
from test_jax import _rand  # noqa: E402


def _assert_matches(got, want, rtol=1e-5, atol=1e-6):
    test_jax._assert_matches(got, want, rtol, atol)


def mlp(params, x, activation="tanh"):
    h = getattr(jnp, activation)(x @ params["w1"] + params["b1"])
    return {"out": h @ params["w2"], "norm": jnp.sum(h * h)}


PARAMS = {"w1": _rand((16, 32), 1, 0.3), "b1": _rand(32, 2), "w2": _rand((32, 4), 3, 0.3)}


def test_one_compile_per_signature_and_static_arguments():
    jitted = sft.jit(mlp, static_argnums=2)
    x = _rand((8, 16), 4)
    _assert_matches(jitted(PARAMS, x, "tanh"), jax.jit(mlp, static_argnums=2)(PARAMS, x, "tanh"))
    jitted(PARAMS, _rand((8, 16), 5), "tanh")  # same signature: no compile
    assert len(jitted.compiled) == 1
    small = _rand((3, 16), 6)  # the last, smaller batch
    _assert_matches(jitted(PARAMS, small, "tanh"), jax.jit(mlp, static_argnums=2)(PARAMS, small, "tanh"))
    _assert_matches(jitted(PARAMS, x, "sin"), jax.jit(mlp, static_argnums=2)(PARAMS, x, "sin"))
    assert len(jitted.compiled) == 3
    _assert_matches(jitted(PARAMS, x=x, activation="tanh"), jax.jit(mlp, static_argnums=2)(PARAMS, x, "tanh"))


def test_numpy_float64_is_taken_as_jax_takes_it():
    """With x64 off, jax.jit computes a float64 numpy input in float32: so does sft.jit (it
    compiled for f32, then refused the same arrays, before)."""
    x = np.random.default_rng(7).standard_normal((8, 16))
    params = jax.tree_util.tree_map(np.asarray, PARAMS)
    got = sft.jit(mlp)(params, x)
    _assert_matches(got, jax.jit(mlp)(params, x))
    assert got["out"].dtype == jnp.float32


def test_results_work_wherever_jax_arrays_do():
    """Results (donated ones too) go into jnp functions and other jax.jit functions (a
    DeviceArray raised "Triggering __jax_array__() during abstractification")."""
    def step(p, x):
        return jax.tree_util.tree_map(lambda a: a * (1.0 - 0.01 * jnp.mean(x)), p), jnp.mean(x)

    jitted = sft.jit(step, donate_argnums=0)
    params = jax.tree_util.tree_map(jnp.copy, PARAMS)
    new, loss = jitted(params, _rand((8, 16), 8))
    assert params["w1"].is_deleted()  # donated, as jax.jit deletes it
    assert float(jnp.sum(new["w1"])) == pytest.approx(float(jax.jit(lambda p: p["w1"].sum())(new)), rel=1e-6)
    assert jitted._device_buffer(new["w1"]) is not new["w1"]  # goes back as its device buffer
    newer, _ = jitted(new, _rand((8, 16), 9))
    want = jax.jit(step)(jax.jit(step)(PARAMS, _rand((8, 16), 8))[0], _rand((8, 16), 9))[0]
    _assert_matches(newer, want)
    with pytest.raises(RuntimeError):
        jnp.sum(new["w1"])  # deleted by the second call


def test_prng_keys_raw_and_typed():
    def noisy(key, x):
        k1, k2 = jax.random.split(key)
        return k1, x + jax.random.normal(k2, x.shape), jax.random.bits(k1, (3,), jnp.uint32)

    jitted = sft.jit(noisy)
    for key in (jax.random.PRNGKey(3), jax.random.key(3)):
        got, want = jitted(key, jnp.zeros(5)), jax.jit(noisy)(key, jnp.zeros(5))
        assert got[0].dtype == want[0].dtype
        data = (lambda k: jax.random.key_data(k) if jnp.issubdtype(k.dtype, jax.dtypes.prng_key) else k)
        np.testing.assert_array_equal(np.asarray(data(got[0])), np.asarray(data(want[0])))
        _assert_matches(got[1:], want[1:])


def test_a_constant_key_inside_the_function():
    """IREE's constant-expression hoisting failed on threefry of a constant key (raw IndexError,
    then an SftError at the call); the host target turns the hoisting off."""
    f = lambda x: x + jax.random.normal(jax.random.PRNGKey(0), x.shape)  # noqa: E731
    _assert_matches(sft.jit(f)(jnp.zeros(4)), jax.jit(f)(jnp.zeros(4)))


def test_unsigned_integers():
    f = lambda a, b: (a + b, a > b)  # noqa: E731
    a = np.arange(250, 256, dtype=np.uint8)
    b = np.full(6, 7, np.uint8)
    _assert_matches(sft.jit(f)(a, b), jax.jit(f)(a, b))


def test_bad_arguments_are_one_line():
    with pytest.raises(SftError, match="hashable"):
        sft.jit(lambda x, s: x, static_argnums=1)(jnp.ones(2), [1, 2])
    with pytest.raises(SftError, match="both static and donated"):
        sft.jit(lambda x: x, static_argnums=0, donate_argnums=0)
    with pytest.raises(SftError, match="non-negative int"):
        sft.jit(lambda x: x, donate_argnums="0")


def test_flax_optax_training_loop_matches_jax_jit():
    """20 steps of a flax MLP with optax AdamW under a warm-up + cosine schedule and global
    norm clipping: parameters within 1e-5 of jax.jit's."""
    nn = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(4)(nn.gelu(nn.Dense(32)(x)))

    model = MLP()
    x, y = _rand((16, 8), 10), _rand((16, 4), 11)
    shapes = jax.eval_shape(model.init, jax.random.key(0), x)
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    params = jax.tree_util.tree_unflatten(tree, [_rand(l.shape, 20 + i, 0.3) for i, l in enumerate(leaves)])
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=5, decay_steps=20)
    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(schedule, weight_decay=0.01))

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    runs = {}
    for name, jitted in (("sft", sft.jit(step, donate_argnums=(0, 1))), ("jax", jax.jit(step))):
        p, s = jax.tree_util.tree_map(jnp.copy, params), tx.init(params)
        for i in range(20):
            p, s, loss = jitted(p, s, x * (1 + 0.01 * i), y)
        runs[name] = (p, loss)
    _assert_matches(runs["sft"][0], runs["jax"][0], rtol=1e-5, atol=1e-5)
    assert float(runs["sft"][1]) == pytest.approx(float(runs["jax"][1]), rel=1e-5)



def test_the_jax_front_ends_models_through_sft_jit():
    """The functions test_jax.py compiles with sft.compile (an MLP, a transformer block, a
    layernorm), through sft.jit; and sft.compile takes numpy float64 as JAX does too."""
    tj = test_jax
    cases = [(tj.mlp, (tj.mlp_params(), _rand((8, 32), 12))),
             (tj.transformer_block, (tj.block_params(), _rand((2, 8, 32), 13))),
             (tj.layernorm, (_rand((2, 16, 8), 14), _rand(8, 15) + 1, _rand(8, 16)))]
    for fn, args in cases:
        _assert_matches(sft.jit(fn)(*args), jax.jit(fn)(*args), rtol=1e-4, atol=1e-5)
    x64 = np.random.default_rng(17).standard_normal((8, 32))
    compiled = sft.compile(tj.mlp, (tj.mlp_params(), x64))
    _assert_matches(compiled(tj.mlp_params(), x64), jax.jit(tj.mlp)(tj.mlp_params(), x64), rtol=1e-4, atol=1e-5)
