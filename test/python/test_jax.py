"""The JAX front end: functions of pytrees compiled by sft match `jax.jit` (values, dtypes,
shapes, structure), with no op left opaque, under search "none" and "model"."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import sft  # noqa: E402
from sft.errors import SftError  # noqa: E402


def _rand(shape, seed, scale=1.0, dtype=np.float32):
    """A JAX array of normal samples, drawn by numpy: eager jax.random compiles per shape, and
    that costs more than the test itself."""
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype))


def _assert_matches(got, want, rtol=1e-4, atol=1e-5):
    """Same pytree structure, JAX arrays of the same dtypes and shapes, close values."""
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, jax.Array), type(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if not jnp.issubdtype(w.dtype, jnp.inexact):  # integers and bools: exactly
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
            continue
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=atol)


# -- models --------------------------------------------------------------------------------------

def mlp(params, x):
    h = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def mlp_params(d_in=32, d_hidden=64, d_out=16, seed=0):
    return {"w1": _rand((d_in, d_hidden), seed, 0.2), "b1": _rand((d_hidden,), seed + 1, 0.1),
            "w2": _rand((d_hidden, d_out), seed + 2, 0.2), "b2": _rand((d_out,), seed + 3, 0.1)}


def layernorm(x, gamma, beta, eps=1e-5):
    # keepdims mean: the broadcast map (d0, d1, d2) -> (d0, d1, 0) once broke sft-lower
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def transformer_block(p, x, heads=4):
    b, s, d = x.shape
    h = layernorm(x, p["ln1_g"], p["ln1_b"])
    q, k, v = (jnp.einsum("bsd,de->bse", h, p[n]).reshape(b, s, heads, d // heads)
               for n in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(d // heads)
    attn = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(scores, axis=-1), v).reshape(b, s, d)
    x = x + attn @ p["wo"]
    h = layernorm(x, p["ln2_g"], p["ln2_b"])
    return x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"]


def block_params(d=32, hidden=64):
    return {"ln1_g": _rand(d, 10, 0.1) + 1, "ln1_b": _rand(d, 11, 0.1), "ln2_g": _rand(d, 12, 0.1) + 1,
            "ln2_b": _rand(d, 13, 0.1), "wq": _rand((d, d), 14, d ** -0.5),
            "wk": _rand((d, d), 15, d ** -0.5), "wv": _rand((d, d), 16, d ** -0.5),
            "wo": _rand((d, d), 17, d ** -0.5), "w1": _rand((d, hidden), 18, d ** -0.5),
            "b1": _rand(hidden, 19, 0.1), "w2": _rand((hidden, d), 20, hidden ** -0.5)}


# -- models compiled as they are -----------------------------------------------------------------

@pytest.mark.parametrize("search", ["none", "model"])
def test_mlp_pytree_params(search):
    params, x = mlp_params(), _rand((8, 32), 7)
    compiled = sft.compile(mlp, (params, x), search=search)
    assert compiled.opaque_ops == 0 and compiled.dispatch_count > 0
    _assert_matches(compiled(params, x), jax.jit(mlp)(params, x))
    # other values, same structure: the compiled program is not specialised to the example
    params2, x2 = mlp_params(seed=3), x * 2.0
    _assert_matches(compiled(params2, x2), jax.jit(mlp)(params2, x2))


@pytest.mark.parametrize("search", ["none", "model"])
def test_transformer_block(search):
    params, x = block_params(), _rand((2, 16, 32), 2)
    compiled = sft.compile(transformer_block, (params, x), search=search, keep_ir=True)
    assert compiled.opaque_ops == 0
    assert (compiled.search is not None) == (search == "model")
    assert "-> (d0, d1, 0)>" in compiled.stages.linalg  # the keepdims broadcast is there
    _assert_matches(compiled(params, x), jax.jit(transformer_block)(params, x))


def test_mixed_precision_matmul_is_a_searched_contraction():
    # bf16 inputs accumulated in f32 (preferred_element_type): one contraction whose tiles the
    # search chooses, with jax.jit's values; before, a reduction IREE tiled alone
    def f(a, b, c):
        y = jax.lax.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        return jax.nn.relu(y) + c
    a, b, c = _rand((64, 256), 30), _rand((256, 128), 31), _rand(128, 32)
    compiled = sft.compile(f, (a, b, c), search="model")
    assert compiled.opaque_ops == 0
    # the search ranked tiles for it (whether the model takes them over IREE's depends on the host)
    (choice,) = compiled.search.ranked[0].kernels
    assert (choice.kernel.m, choice.kernel.n, choice.kernel.k, choice.kernel.input_type) == (64, 128, 256, "bf16")
    assert len(choice.ranked) > 1
    _assert_matches(compiled(a, b, c), jax.jit(f)(a, b, c))


def test_layernorm_alone():
    x, g, b = _rand((2, 16, 8), 4, 3.0), _rand(8, 5) + 1, _rand(8, 6)
    compiled = sft.compile(layernorm, (x, g, b))
    assert compiled.opaque_ops == 0
    _assert_matches(compiled(x, g, b), jax.jit(layernorm)(x, g, b))


def test_flax_cnn():
    nn = pytest.importorskip("flax.linen")

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(8, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = nn.relu(nn.Conv(16, (3, 3), padding="VALID")(x))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    model = CNN()
    x = _rand((2, 12, 12, 3), 5)
    # flax's structure and shapes (traced only), values drawn by numpy: XLA takes ~8 s to
    # compile flax's random initialisers here
    shapes = jax.eval_shape(model.init, jax.random.key(6), x)
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    variables = jax.tree_util.tree_unflatten(
        tree, [_rand(leaf.shape, 30 + i, 0.3) for i, leaf in enumerate(leaves)])
    compiled = sft.compile(model.apply, (variables, x))
    assert compiled.opaque_ops == 0
    _assert_matches(compiled(variables, x), jax.jit(model.apply)(variables, x))


# -- pytrees, dtypes, scalars --------------------------------------------------------------------

def test_pytrees_in_and_out():
    def f(tree, scale):
        a, (b, c) = tree["a"], tree["bc"]
        return {"sum": jnp.sum(a) * scale, "pair": (a @ b, [c.T, c.astype(jnp.int32)])}

    tree = {"a": jnp.arange(12.0).reshape(3, 4), "bc": (jnp.ones((4, 2)), jnp.eye(3) * 2)}
    compiled = sft.compile(f, (tree, 2.0))  # a Python scalar: traced, weak f32, like jax.jit
    want = jax.jit(f)(tree, 2.0)
    _assert_matches(compiled(tree, 2.0), want)
    assert compiled(tree, 2.0)["sum"].shape == ()                 # a 0-d result stays 0-d
    _assert_matches(compiled(tree, 3), jax.jit(f)(tree, 3))       # an int for a float scalar
    leaves = jax.tree_util.tree_leaves((tree, np.float32(2.0)))   # the flat form is accepted too
    _assert_matches(compiled(*leaves), want)
    # numpy in, numpy out
    out = compiled(jax.tree_util.tree_map(np.asarray, tree), np.float32(2.0))
    assert isinstance(out["pair"][0], np.ndarray)
    with pytest.raises(SftError, match="structure"):
        compiled({"a": tree["a"], "bc": tree["bc"][0]}, 2.0)
    with pytest.raises(SftError, match="expected float32"):
        compiled({"a": tree["a"].astype(jnp.int32), "bc": tree["bc"]}, 2.0)


def test_unused_argument_and_abstract_example():
    """An argument the function never reads is still an input (JAX would drop it by default);
    an example argument may be a jax.ShapeDtypeStruct (nothing is computed on examples)."""
    def f(x, unused, y):
        return x * y

    x = _rand((3, 4), 12)
    compiled = sft.compile(f, (jax.ShapeDtypeStruct((3, 4), jnp.float32),
                               jax.ShapeDtypeStruct((5,), jnp.int32), 2.0))
    assert [shape for shape, _ in compiled.input_specs] == [(3, 4), (5,), ()]
    _assert_matches(compiled(x, jnp.zeros(5, jnp.int32), 2.0), jax.jit(f)(x, jnp.zeros(5, jnp.int32), 2.0))


@pytest.mark.parametrize("dtype", ["bfloat16", "int32", "bool"])
def test_dtypes(dtype):
    def f(x, y):
        if x.dtype == jnp.bool_:
            return x & y, jnp.any(x), jnp.where(x, 1, 2)
        return x * y + x, jnp.max(x, axis=0), (x > y)

    x, y = _rand((4, 8), 8, 4.0).astype(dtype), _rand((4, 8), 9, 4.0).astype(dtype)
    compiled = sft.compile(f, (x, y))
    assert compiled.opaque_ops == 0
    # bf16: IREE may keep x * y in f32 before the add where JAX rounds it to bf16 first, so
    # results differ by up to a bf16 ulp of the product (|x * y| < 16 here: 1/16)
    tol = dict(rtol=1e-2, atol=1 / 16) if dtype == "bfloat16" else dict(rtol=1e-6)
    _assert_matches(compiled(x, y), jax.jit(f)(x, y), **tol)


def test_float64_in_a_process_of_its_own():
    """f64 needs jax_enable_x64, which is global: the check runs in its own process, under
    `jax.enable_x64(True)`, so that this process's JAX config is untouched."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np, sft
        with jax.enable_x64(True):
            x = jnp.linspace(0.0, 1.0, 12, dtype=jnp.float64).reshape(3, 4)
            f = lambda x, s: (jnp.exp(x) @ x.T * s, jnp.sum(x))
            compiled = sft.compile(f, (x, 1.5))
            got, want = compiled(x, 1.5), jax.jit(f)(x, 1.5)
            assert [g.dtype for g in got] == [jnp.float64, jnp.float64], [g.dtype for g in got]
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert not jax.config.jax_enable_x64


# -- a training step -----------------------------------------------------------------------------

def test_training_step_matches_jax():
    def loss(params, x, y):
        return jnp.mean(jnp.square(mlp(params, x) - y))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value

    params = mlp_params(16, 32, 4)
    x, y = _rand((8, 16), 9), _rand((8, 4), 10)
    compiled = sft.compile(step, (params, x, y))
    assert compiled.opaque_ops == 0
    ours, theirs, reference = params, params, jax.jit(step)
    losses = []
    for _ in range(3):
        ours, ours_loss = compiled(ours, x, y)  # the compiled step takes its own output back
        theirs, their_loss = reference(theirs, x, y)
        losses.append(float(ours_loss))
        np.testing.assert_allclose(ours_loss, their_loss, rtol=1e-4)
    _assert_matches(ours, theirs, rtol=1e-4)
    assert losses[2] < losses[0]


def test_filter_gradients_as_matmuls_match_jax():
    """The filter gradients of a stride-1 and a stride-2 convolution (windows larger than their
    outputs), which search="model" computes as patch copies and matmuls: jax.jit's values."""
    from jax import lax

    def loss(w1, w2, x):
        h = lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h = lax.conv_general_dilated(jnp.tanh(h), w2, (2, 2), "SAME",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return jnp.sum(jnp.square(h))

    grads = jax.grad(loss, argnums=(0, 1))
    args = (_rand((4, 3, 3, 3), 1, 0.3), _rand((4, 4, 3, 3), 2, 0.3), _rand((2, 3, 12, 12), 3))
    compiled = sft.compile(grads, args, search="model")
    assert len(compiled.plan.im2col) == 2
    _assert_matches(compiled(*args), jax.jit(grads)(*args), rtol=1e-4, atol=1e-4)


def test_optax_adam_step():
    optax = pytest.importorskip("optax")
    opt = optax.adam(1e-2)

    def step(params, state, x):
        grads = jax.grad(lambda p: jnp.sum(jnp.square(mlp(p, x))))(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params = mlp_params(8, 16, 4)
    state = opt.init(params)  # holds an int32 step count: a 0-d int input and result
    x = _rand((4, 8), 11)
    compiled = sft.compile(step, (params, state, x))
    ours = theirs = (params, state)
    for _ in range(3):
        ours, theirs = compiled(*ours, x), jax.jit(step)(*theirs, x)
    _assert_matches(ours, theirs, rtol=1e-4)


def test_donated_state_stays_on_the_device():
    """donate_argnums as jax.jit's: the state's new values come back as DeviceArrays, are fed
    back without a copy, match jax.jit over 5 steps (values, dtypes, shapes, the int32 step
    count included), and a donated array is deleted; the caller's numpy state is untouched."""
    optax = pytest.importorskip("optax")
    opt = optax.adam(1e-2)

    def step(params, state, x, y):
        value, grads = jax.value_and_grad(
            lambda p: jnp.mean(jnp.square(mlp(p, x) - y)))(params)
        updates, state = opt.update(grads, state, params)
        return value, optax.apply_updates(params, updates), state

    params = jax.tree_util.tree_map(np.asarray, mlp_params(8, 16, 4))
    state = jax.tree_util.tree_map(np.asarray, opt.init(params))
    before = jax.tree_util.tree_map(np.copy, params)
    x, y = np.asarray(_rand((4, 8), 12)), np.asarray(_rand((4, 4), 13))
    compiled = sft.compile(step, (params, state, x, y), donate_argnums=(0, 1))
    ours, theirs, reference = (params, state), (params, state), jax.jit(step)
    for i in range(5):
        ours_loss, *ours = compiled(*ours, x, y)
        their_loss, *theirs = reference(*theirs, x, y)
        np.testing.assert_allclose(ours_loss, their_loss, rtol=1e-4)
        if i == 0:
            first = ours
    leaves = jax.tree_util.tree_leaves(ours)
    assert leaves and all(isinstance(a, sft.DeviceArray) for a in leaves)
    assert isinstance(ours_loss, np.ndarray)  # not donated: back on the host
    for got, want in zip(leaves, jax.tree_util.tree_leaves(theirs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, params, before))
    with pytest.raises(SftError, match="donated") as exc:
        np.asarray(jax.tree_util.tree_leaves(first)[0])  # donated by the second call
    _one_line(exc)
    # jnp reads a DeviceArray; the compiled call also takes the state as JAX arrays
    assert float(jnp.sum(jnp.asarray(leaves[0]))) == pytest.approx(float(np.sum(leaves[0])))
    jax_state = jax.tree_util.tree_map(jnp.asarray, ours)
    np.testing.assert_allclose(compiled(*jax_state, x, y)[0], reference(*theirs, x, y)[0],
                               rtol=1e-4)


def test_donate_argnums_errors():
    with pytest.raises(SftError, match="2 positional arguments") as exc:
        sft.compile(mlp, (mlp_params(), jnp.ones((8, 32))), donate_argnums=(2,))
    _one_line(exc)
    torch = pytest.importorskip("torch")
    with pytest.raises(SftError, match="for JAX functions") as exc:
        sft.compile(torch.nn.Linear(2, 2), (torch.ones(1, 2),), donate_argnums=(0,))
    _one_line(exc)


# -- errors --------------------------------------------------------------------------------------

def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text, text
    return text


def test_not_traceable():
    def uses_numpy(x):
        return np.sin(np.asarray(x))  # a concrete value of a traced array

    def branches(x):
        return x if x.sum() > 0 else -x  # Python control flow on a traced value

    for fn in (uses_numpy, branches):
        with pytest.raises(SftError, match="could not trace") as exc:
            sft.compile(fn, (jnp.ones((2, 2)),))
        assert fn.__name__ in _one_line(exc)


def test_wrong_example_args():
    params, x = mlp_params(), jnp.ones((8, 5))  # 5 features where w1 takes 32
    with pytest.raises(SftError, match="could not trace") as exc:
        sft.compile(mlp, (params, x))
    _one_line(exc)
    with pytest.raises(SftError, match="could not trace") as exc:
        sft.compile(mlp, (params,))  # an argument missing
    _one_line(exc)
    with pytest.raises(SftError, match="could not trace") as exc:
        sft.compile(lambda s: s, ("text",))  # not an array
    _one_line(exc)
    with pytest.raises(SftError, match="tuple of positional arguments") as exc:
        sft.compile(jnp.sin, jnp.ones(3))  # the array itself, not (array,)
    _one_line(exc)
    with pytest.raises(SftError, match="complex64 is not supported") as exc:
        sft.compile(lambda a: a + 1, (jnp.ones(3, jnp.complex64),))
    _one_line(exc)
    with pytest.raises(SftError, match="key<fry> is not supported.*sft.jit") as exc:
        sft.compile(lambda key: jax.random.normal(key, (3,)), (jax.random.key(0),))
    _one_line(exc)


def test_donate_argnums_may_be_one_int_as_in_jax_jit():
    def sgd(params, x):
        grads = jax.grad(lambda p: jnp.sum(mlp(p, x) ** 2))(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    params, x = mlp_params(), jnp.ones((8, 32))
    want = jax.jit(sgd)(params, x)
    got = sft.compile(sgd, (params, x), donate_argnums=0)(mlp_params(), x)
    for leaf, ref in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_a_constant_prng_key_runs_or_fails_in_one_line():
    """A PRNGKey made inside the function: IREE 3.13 compiles its StableHLO, then its runtime
    fails the call (copy_buffer OUT_OF_RANGE; IREE alone fails the same way). sft says so in one
    SftError line naming the runtime, never a raw IndexError; where IREE runs it, the values
    are jax.jit's."""
    def f(x):
        return x + jax.random.normal(jax.random.PRNGKey(0), x.shape)

    x = np.ones((4,), np.float32)
    compiled = sft.compile(f, (x,))
    try:
        got = compiled(x)
    except sft.SftError as err:
        assert "\n" not in str(err) and "run time" in str(err) and "IREE" in str(err)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(f)(x)), rtol=1e-6)
