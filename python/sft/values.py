"""Values crossing the boundary of a compiled program: torch tensors, JAX arrays, numpy arrays
and Python scalars in, the same kinds out, with the dtypes, shapes and structure the model itself gives.

numpy has no bfloat16; `ml_dtypes` (which IREE's runtime reads) supplies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from .errors import SftError

# MLIR element type -> numpy dtype (signless integers as the signed ones torch uses)
NP_TYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
            "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_}


@dataclass(frozen=True)
class Result:
    """What one flat result of the compiled function is for the caller: a model output, a
    constant the model returns (a Python scalar, taken from the export), an input the model
    updates in place (`value` is its position), or a result the caller never sees."""

    kind: str            # "output" | "constant" | "mutation" | "state" | "device" | "dropped"
    value: object = None  # output: its numpy dtype where IREE's differs (uint8); mutation:
    #                       the input's position; state: its name; constant: the value;
    #                       device (a donated input's new value, left on the device): that
    #                       input's position


@dataclass(frozen=True)
class Signature:
    """The compiled function's inputs (shape, dtype), which follow its state, and how its flat
    results map back to what the model returns: `unflatten(leaves)` rebuilds the model's output structure (a front end's
    pytree); None gives the outputs as a flat tuple, or one value."""

    inputs: tuple[tuple[tuple[int, ...], np.dtype], ...]
    results: tuple[Result, ...] = ()
    unflatten: Callable[[list], object] | None = None
    # The model's state (name, shape, dtype), passed before the inputs: parameters, buffers.
    state: tuple[tuple[str, tuple[int, ...], np.dtype], ...] = ()
    # A front end's pytrees: flatten(args) turns a call's positional arguments into the flat
    # inputs, raising SftError on another structure; None means the arguments are flat already.
    flatten: Callable[[tuple], list] | None = None


def updated_results(signature: Signature) -> tuple[int, ...]:
    """The results that are new values of arguments: the model's new state, donated inputs'."""
    return tuple(i for i, r in enumerate(signature.results or ())
                 if r is not None and r.kind in ("state", "device"))


def aliases(signature: Signature) -> dict[int, int]:
    """Which results are new values of which arguments, kept on the device to be passed back
    (argument index -> result index, arguments counted with the state first): the state a
    model updates, and JAX's donated inputs.

    Not written in place (IREE's `iree.abi.output` on the argument, what IREE's input phase
    makes of JAX's donation): IREE 3.13 then writes the new value before the program's last
    read of the old one (docs/results.md, "State in place"; test_iree_aliasing.py). Where the
    target says so (`Target.state_in_place`), each such result gets a storage argument of its
    own instead (`passes.output_storage`, `storage_pairs`)."""
    names = [name for name, _, _ in signature.state]
    found = {}
    for i, result in enumerate(signature.results):
        if result.kind == "state":
            found[names.index(result.value)] = i
        elif result.kind == "device":
            found[len(names) + result.value] = i
    return found


def storage_pairs(signature: Signature) -> list[tuple[int, int]]:
    """(argument, result) of every value a call replaces (`aliases`), in result order: the
    order of the storage arguments `passes.output_storage` appends."""
    return sorted(aliases(signature).items(), key=lambda pair: pair[1])


def argument_specs(signature: Signature) -> list[tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every argument: the state's, then the inputs'."""
    return [*((shape, dtype) for _, shape, dtype in signature.state), *signature.inputs]


class DeviceArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A compiled function's result that stays on its device (a donated input's new value):
    passed to a later call of a module on the same driver it costs no copy. Reading it
    (`np.asarray(a)`, `jnp.asarray(a)`, `float(a)`, arithmetic) copies it to the host.

    Donated to a call (`donate_argnums`), the array is deleted, as a donated JAX array is (its
    buffer freed once the call is done with it): reading it is an SftError."""

    __array_priority__ = 100

    def __init__(self, buffer, driver: str, dtype=None):
        self._buffer, self.driver = buffer, driver
        # `dtype`: the caller's, where IREE's differs (uint8 is i8 on the device)
        self.shape, self.dtype = tuple(buffer.shape), np.dtype(dtype or buffer.dtype)

    @property
    def buffer(self):
        """The runtime's device array (iree.runtime.DeviceArray)."""
        if self._buffer is None:
            raise SftError(f"this {self.dtype}{list(self.shape)} array was donated to a compiled "
                           "call and is deleted: use that call's result")
        return self._buffer

    def delete(self) -> None:
        self._buffer = None

    def is_deleted(self) -> bool:
        return self._buffer is None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def to_numpy(self) -> np.ndarray:
        """A copy on the host (a copy: the device buffer may later be donated and overwritten)."""
        return np.array(self.buffer.to_host(), copy=True).view(self.dtype)

    def __array__(self, dtype=None, copy=None):
        return self.to_numpy() if dtype is None else self.to_numpy().astype(dtype)

    def __jax_array__(self):
        import jax.numpy as jnp

        return jnp.asarray(self.to_numpy())

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        host = [x.to_numpy() if isinstance(x, DeviceArray) else x for x in inputs]
        return getattr(ufunc, method)(*host, **kwargs)

    def block_until_ready(self):
        return self  # calls return when their results are computed

    __float__ = lambda self: float(self.to_numpy())
    __int__ = lambda self: int(self.to_numpy())
    __bool__ = lambda self: bool(self.to_numpy())
    __len__ = lambda self: self.shape[0]
    __getitem__ = lambda self, key: self.to_numpy()[key]

    def __repr__(self):
        if self._buffer is None:
            return f"sft.DeviceArray(deleted, {self.dtype}{list(self.shape)})"
        return f"sft.DeviceArray({self.to_numpy()!r}, driver={self.driver!r})"


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def is_jax(x) -> bool:
    return type(x).__module__.startswith("jax")


def array_kind(args) -> str:
    """The kind of array results are given back as: that of the call's arguments."""
    if any(is_torch(a) for a in args):
        return "torch"
    if any(is_jax(a) for a in args):
        return "jax"
    return "numpy"


def to_numpy(x) -> np.ndarray:
    """A torch tensor (any device, bf16 included), numpy array or Python scalar as numpy."""
    if is_torch(x):
        import torch

        if x.is_cpu and not x.requires_grad and x.dtype != torch.bfloat16:
            try:  # the common case, its memory as it is (1.1 us, detach and cpu first 2.9)
                return x.numpy()
            except RuntimeError:  # a conjugate or negative view: resolved below
                pass
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def to_torch(a: np.ndarray):
    import torch

    a = np.asarray(a)
    if a.dtype.kind == "V" and a.dtype == ml_dtypes.bfloat16:  # (kind first: a call's microseconds)
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def spec_of(x) -> tuple[tuple[int, ...], np.dtype]:
    a = to_numpy(x)
    return tuple(a.shape), a.dtype


def check_inputs(args, specs, driver: str = "") -> list:
    """The call's arguments as C-contiguous numpy arrays of the compiled shapes and dtypes;
    DeviceArrays of `driver` as they are (on the device)."""
    if len(args) != len(specs):
        raise SftError(f"expected {len(specs)} inputs, got {len(args)}")
    arrays = []
    for i, (arg, (shape, dtype)) in enumerate(zip(args, specs)):
        if type(arg) is np.ndarray and arg.shape == shape and arg.dtype == dtype \
                and arg.flags.c_contiguous and arg.dtype.kind != "u":
            arrays.append(arg)  # the common case, checked first: a call costs microseconds
            continue
        if isinstance(arg, DeviceArray) and arg.driver == driver and arg.shape == shape \
                and arg.dtype == dtype:
            arrays.append(arg.buffer)
            continue
        arr = to_numpy(arg)
        if tuple(arr.shape) != shape or arr.dtype != dtype:
            raise SftError(f"input {i}: expected {np.dtype(dtype)}{list(shape)}, "
                           f"got {arr.dtype}{list(arr.shape)}")
        # np.ascontiguousarray would turn a 0-d array into shape [1]
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")
        # IREE's integers carry no sign: uint8 goes in as the same bits, i8 (uint32: i32, ...)
        arrays.append(arr.view(f"i{arr.dtype.itemsize}") if arr.dtype.kind == "u" else arr)
    return arrays


def _as_kind(out, kind: str):
    if not isinstance(out, np.ndarray):
        return out  # a Python scalar
    if kind == "torch":
        if out.base is None and out.flags.owndata and out.flags.writeable and out.dtype.kind != "V":
            # made by this call alone (a split's parts joined, a result copied off a borrowed
            # buffer): torch takes it as it is; IREE's buffers are copied (`to_torch`)
            import torch

            return torch.from_numpy(out)
        return to_torch(out)
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.asarray(out)
    return out


def assemble(outs: list, args, signature: Signature):
    """The model's return value from the compiled function's flat results, as arrays of the
    arguments' kind; inputs the model updates in place are updated in the caller's objects."""
    values = []
    results = signature.results or tuple(Result("output") for _ in outs)
    if len(results) != len(outs):
        raise SftError(f"the compiled function returned {len(outs)} results, expected {len(results)}")
    kind = array_kind(args)
    for result, out in zip(results, outs):
        if result.kind == "output":
            if result.value is not None and isinstance(out, np.ndarray):
                out = out.view(result.value)  # uint8: IREE's integers carry no sign
            values.append(_as_kind(out, kind))
        elif result.kind == "device":
            values.append(out)  # a DeviceArray, left on the device
        elif result.kind == "constant":
            values.append(result.value)
        elif result.kind == "mutation":
            _update_in_place(args[result.value], out)
    if signature.unflatten is not None:
        return signature.unflatten(values)
    return values[0] if len(values) == 1 else tuple(values)


def _update_in_place(arg, new: np.ndarray) -> None:
    if is_torch(arg):
        arg.copy_(to_torch(new))
    elif isinstance(arg, np.ndarray) and arg.flags.writeable:
        np.copyto(arg, new)
