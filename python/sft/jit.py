"""`sft.jit`: `jax.jit`'s interface over sft.compile.

    step = sft.jit(train_step, donate_argnums=(0, 1))
    params, opt_state, loss = step(params, opt_state, batch)

As `jax.jit`: the function is traced and compiled at its first call, once per signature of
its arguments (their pytree structure, each leaf's shape and dtype, the values of the static
arguments), and a call with a new signature (the last, smaller batch) compiles again; numpy
inputs are taken as jax.jit takes them (with x64 off, float64 as float32, int64 as int32);
PRNG keys, raw (uint32) or typed (`jax.random.key`), and unsigned integers go in and come out;
every result is a `jax.Array`. Donated arguments are deleted by the call, as JAX deletes them.

Results come back as jax.Arrays over the same memory (DLPack) where the device is the host's;
one the function returns in place of a donated argument is recognised when it comes back as an
argument, and its device buffer is passed as it is: a training step's state crosses no copy.
"""

from __future__ import annotations

import inspect
import weakref

import numpy as np

from .errors import SftError
from .plan import Plan
from .targets import Target, get_target


def jit(fn=None, *, static_argnums=(), donate_argnums=(), target: Target | str = "host",
        search: str = "none", plan: Plan | None = None, precision: str = "f32"):
    """`fn` compiled by sft per signature of its arguments, called as `jax.jit(fn)` is.

    `static_argnums` and `donate_argnums` (an int or a sequence) as `jax.jit`'s: static
    arguments must be hashable and are part of the signature; donated ones are deleted by the
    call. `target`, `search`, `plan` and `precision` as `sft.compile`'s. Usable as a decorator,
    bare or with keywords (`@sft.jit(donate_argnums=0)`)."""
    if fn is None:
        return lambda f: jit(f, static_argnums=static_argnums, donate_argnums=donate_argnums,
                             target=target, search=search, plan=plan, precision=precision)
    return Jitted(fn, _positions(static_argnums, "static_argnums"),
                  _positions(donate_argnums, "donate_argnums"), get_target(target), search, plan,
                  precision)


def _positions(value, what: str) -> tuple[int, ...]:
    values = (value,) if isinstance(value, int) else tuple(value)
    if not all(isinstance(v, int) and v >= 0 for v in values):
        raise SftError(f"{what} must be a non-negative int or a sequence of them, not {value!r}")
    return values


class Jitted:
    """A function compiled per signature; `compiled` holds one CompiledModel per signature."""

    def __init__(self, fn, static_argnums, donate_argnums, target, search, plan, precision):
        if not callable(fn):
            raise SftError(f"sft.jit takes a function, not {type(fn).__name__}")
        both = set(static_argnums) & set(donate_argnums)
        if both:
            raise SftError(f"argument {min(both)} is both static and donated")
        self.fn, self.static_argnums, self.donate_argnums = fn, static_argnums, donate_argnums
        self.options = dict(target=target, search=search, plan=plan, precision=precision)
        self.compiled: dict = {}
        self._on_device: dict[int, tuple] = {}  # buffer address -> (jax array ref, DeviceArray)
        self.__name__ = getattr(fn, "__name__", "function")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        import jax

        args = self._positional(args, kwargs)
        if any(i >= len(args) for i in (*self.static_argnums, *self.donate_argnums)):
            raise SftError(f"{self.__name__} got {len(args)} positional arguments; "
                           f"static_argnums {self.static_argnums}, donate_argnums "
                           f"{self.donate_argnums}")
        statics = tuple(args[i] for i in self.static_argnums)
        try:
            hash(statics)
        except TypeError:
            raise SftError(f"static arguments must be hashable, as jax.jit's: got "
                           f"{[type(s).__name__ for s in statics]}") from None
        dynamic = [i for i in range(len(args)) if i not in self.static_argnums]
        leaves, tree = jax.tree_util.tree_flatten(tuple(args[i] for i in dynamic))
        leaves = [_canonical(x) for x in leaves]
        keys = [_key_impl(x) for x in leaves]
        leaves = [jax.random.key_data(x) if impl else x for x, impl in zip(leaves, keys)]
        signature = (statics, tree, tuple(_spec(x) for x in leaves), tuple(keys))
        compiled = self.compiled.get(signature)
        if compiled is None:
            compiled = self._compile(args, dynamic, statics, tree, leaves, keys)
            self.compiled[signature] = compiled
        model, out_keys = compiled
        donated = [dynamic.index(i) for i in self.donate_argnums]
        inputs = [self._device_buffer(x) for x in leaves]
        out = model(*jax.tree_util.tree_unflatten(tree, inputs))
        self._delete_donated(tree, leaves, donated)
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        out_leaves = [self._as_jax(x) for x in out_leaves]
        out_leaves = [jax.random.wrap_key_data(x, impl=impl) if impl else x
                      for x, impl in zip(out_leaves, out_keys)]
        return jax.tree_util.tree_unflatten(out_tree, out_leaves)

    # -- arguments --------------------------------------------------------------------------

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        if not kwargs:
            return args
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except (TypeError, ValueError) as err:
            raise SftError(f"{self.__name__}: {err}") from None
        if bound.kwargs:
            raise SftError(f"{self.__name__}: keyword-only arguments ({', '.join(bound.kwargs)}) "
                           "are not supported; pass them positionally or bind them with "
                           "functools.partial")
        return tuple(bound.args)

    def _device_buffer(self, x):
        """A jax.Array this function returned in place of a donated argument: its device buffer
        (no copy); anything else as it is."""
        entry = self._on_device.get(_address(x))
        if entry is not None and entry[0]() is x:
            return entry[1]
        return x

    def _delete_donated(self, tree, leaves, donated: list[int]) -> None:
        """Donated arguments are deleted, as jax.jit deletes them."""
        import jax

        if not donated:
            return
        per_arg = jax.tree_util.tree_unflatten(tree, list(range(len(leaves))))
        for position in donated:
            for index in jax.tree_util.tree_leaves(per_arg[position]):
                x = leaves[index]
                self._on_device.pop(_address(x), None)
                if isinstance(x, jax.Array) and not x.is_deleted():
                    x.delete()

    def _as_jax(self, x):
        """A result as a jax.Array: a DeviceArray (a donated argument's new value) over the
        same memory where the device is the host's, remembered for the next call."""
        import jax
        import jax.numpy as jnp

        from .values import DeviceArray

        if not isinstance(x, DeviceArray):
            return x if isinstance(x, jax.Array) else jnp.asarray(x)
        host = x.buffer.to_host()  # the mapped buffer on a host device, a copy on a GPU
        if x.dtype != host.dtype:
            host = host.view(x.dtype)  # unsigned integers: IREE's carry no sign
        array = jax.dlpack.from_dlpack(host) if host.flags.c_contiguous else jnp.asarray(host)
        address = _address(array)
        if address is not None:
            self._on_device[address] = (weakref.ref(array), x)
            weakref.finalize(array, self._on_device.pop, address, None)
        return array

    # -- compiling --------------------------------------------------------------------------

    def _compile(self, args, dynamic, statics, tree, leaves, keys):
        """A CompiledModel of the function at these arguments' signature, and which of its
        result leaves are typed PRNG keys (their impl)."""
        import jax

        from .api import compile as sft_compile

        fn, static_argnums = self.fn, self.static_argnums

        def traced(*dynamic_args):
            flat, _ = jax.tree_util.tree_flatten(dynamic_args)
            flat = [jax.random.wrap_key_data(x, impl=impl) if impl else x
                    for x, impl in zip(flat, keys)]
            dynamic_args = jax.tree_util.tree_unflatten(tree, flat)
            full, it = [], iter(dynamic_args)
            for i in range(len(args)):
                full.append(statics[static_argnums.index(i)] if i in static_argnums else next(it))
            return fn(*full)

        def unkeyed(*dynamic_args):  # typed keys out as their data
            return jax.tree_util.tree_map(
                lambda x: jax.random.key_data(x) if _key_impl(x) else x, traced(*dynamic_args))

        traced.__name__ = unkeyed.__name__ = self.__name__
        examples = jax.tree_util.tree_unflatten(tree, [_example(x) for x in leaves])
        out_shapes = jax.eval_shape(traced, *examples)
        out_keys = [_key_impl(x) for x in jax.tree_util.tree_leaves(out_shapes)]
        donate = tuple(dynamic.index(i) for i in self.donate_argnums)
        model = sft_compile(unkeyed, tuple(examples), donate_argnums=donate, **self.options)
        return model, out_keys


def _canonical(x):
    """A leaf as jax.jit sees it: numpy arrays and numpy scalars in JAX's canonical dtype
    (float64 -> float32 while x64 is off); jax arrays, Python scalars and the rest as they are."""
    import jax

    if isinstance(x, (np.ndarray, np.generic)):
        dtype = jax.dtypes.canonicalize_dtype(x.dtype)
        return np.asarray(x, dtype)
    return x


def _key_impl(x):
    """The PRNG implementation of a typed key array (or its shape), else None."""
    import jax

    dtype = getattr(x, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return dtype._impl  # arrays and eval_shape's structs alike (key_impl takes arrays only)
    return None


def _spec(x):
    if isinstance(x, (bool, int, float, complex)):
        return type(x)  # a Python scalar: traced weakly typed, as jax.jit does
    return tuple(np.shape(x)), str(x.dtype)


def _example(x):
    import jax

    if isinstance(x, (bool, int, float, complex)):
        return x
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype)


def _address(x):
    import jax

    if isinstance(x, jax.Array) and not x.is_deleted():
        try:
            return x.unsafe_buffer_pointer()
        except Exception:  # noqa: BLE001 — an array of several buffers has no one address
            return None
    return None
