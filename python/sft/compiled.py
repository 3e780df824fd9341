"""The object `sft.compile` returns: a compiled module that owns the model's state on the device."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .backend import load
from .backend.iree import Artifact
from .backend.parts import PartsLoaded
from .backend.runtime import to_host
from .errors import SftError
from .passes.hold_transposed import fixed_state, held_array, holding, user_array
from .passes.split_batch import split_of
from .plan import Plan
from .values import (DeviceArray, Signature, argument_specs, assemble, check_inputs,
                     storage_pairs, to_numpy, to_torch)

if TYPE_CHECKING:
    from .search import SearchReport


# what torch's load_state_dict returns
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


@dataclass
class Stages:
    """The program's text at each step, kept when `keep_ir=True`."""

    linalg: str = ""
    sft: str = ""
    lowered: str = ""
    planned: str = ""


@dataclass
class CompiledModel:
    """A compiled program. Call it with torch tensors, JAX arrays or numpy arrays, in the order
    of the example inputs; it returns what the model returns (a tensor, a tuple, a dict, ...)
    with the model's dtypes and shapes, as arrays of the kind it was called with. Inputs the
    model updates in place are updated.

    The module is loaded on its device when compiled, or where this machine lacks that device
    when first used (a module compiled for a GPU can still be saved with `save`); the model's
    parameters and buffers are uploaded once and stay there between calls; `load_state_dict`
    swaps in new values without compiling again."""

    artifact: Artifact
    plan: Plan
    signature: Signature
    state: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    stages: Stages = field(default_factory=Stages)
    opaque_ops: int = 0
    search: SearchReport | None = None
    entry: str = "main"
    seconds: dict = field(default_factory=dict)  # compile time per phase (import, raise, ...)
    # how a batch split's parts make the results (`plan.batch_split`, `SplitLayout`)
    split_layout: object = None

    def __post_init__(self):
        self._loaded = None
        self._mode = None
        # set by sft.compile: its outputs leave autograd, so an input that requires grad is refused
        self.inference_only = False
        self._device_state: dict = {}  # name -> device array, or a host array not yet uploaded
        # (argument, result) of each output storage argument the module takes, and per result
        # the buffer its next call writes it into: the one that held the value before the old
        # one (`passes.output_storage`; two buffers per value, taking turns)
        self._storage_pairs = storage_pairs(self.signature) if self.artifact.target.state_in_place else []
        self._spare: dict[int, object] = {}
        # results that are all model outputs (no state, donated input or mutation among them)
        # are read back as the call returns them
        self._outputs_only = not self._storage_pairs and all(
            r is not None and r.kind in ("output", "constant") for r in self.signature.results or ())
        if not set(self.plan.held) <= set(fixed_state(self.signature)):
            raise SftError("plan.held keeps arguments transposed on the device: only state that "
                           "no call replaces can be held so")
        # the state held transposed on the device (`passes.hold_transposed`), by name: its
        # panel width where also packed (`passes.hold_packed`), else 0
        self._holding = holding(self.plan)
        self._held = {self.signature.state[a][0]: n0 for a, n0 in self._holding.items()}
        self._split = split_of(self.plan)
        if self._split and (self._storage_pairs or not self.split_layout.updates_once()):
            raise SftError("plan.batch_split and plan.weight_split run parts side by side: a "
                           "program that updates its state other than from sums over its batch, "
                           "or in place, cannot be split")
        try:  # loaded now where its device is here: the state goes straight to it, uncopied
            self._device()
        except SftError:
            pass  # no such device here: the state waits as a host copy (GPT-2 small: +550 MB)
        self.load_state_dict(self.state)
        self.state = {}  # the device holds it now; state_dict() reads it back

    def watch_mode(self, model) -> None:
        """Refuse calls once `model`'s train/eval mode differs from the one compiled in (as
        torch.compile's guards would compile again): never the other mode's results silently."""
        import weakref

        # the module tree is walked once; weak references: the compiled model does not keep it
        modules = [weakref.ref(m) for m in model.modules()]
        self._mode = (modules, tuple(m().training for m in modules))

    def _check_mode(self) -> None:
        modes = tuple(getattr(m(), "training", None) for m in self._mode[0])
        if None not in modes and modes != self._mode[1]:
            raise SftError("the model's train/eval mode changed since it was compiled (the mode is "
                           "compiled in: batch norm's statistics, dropout); compile it again in "
                           "this mode")

    def _device(self):
        """The module loaded on its device (the first time: loaded, and the state uploaded)."""
        if self._loaded is None and self._split:
            self._loaded = PartsLoaded(self.artifact, self.entry, self._split[0], self.split_layout,
                                       self._holding)
        if self._loaded is None:
            self._loaded = load(self.artifact, entry=self.entry, driver=self.plan.driver)
            self._device_state = {name: self._loaded.upload(value) if isinstance(value, np.ndarray)
                                  else value for name, value in self._device_state.items()}
        return self._loaded

    def save(self, path) -> None:
        """Write the compiled module (.vmfb) to `path`; run it with IREE's tools or runtime on
        the target's driver (the model's state, if any, comes first among its arguments, in
        the order of `signature.state`, those at `plan.held` transposed and those at
        `plan.packed` packed too, as the compiled model uploads them:
        `passes.hold_transposed.held_array`; on a target that writes state in
        place, one storage argument per updated value follows the inputs,
        `passes.output_storage`)."""
        try:
            with open(path, "wb") as f:
                f.write(self.artifact.vmfb)
        except OSError as err:
            raise SftError(f"cannot write the module: {err.strerror or err}", str(path)) from None

    @property
    def dispatch_count(self) -> int:
        return self.artifact.dispatch_count

    @property
    def input_specs(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return list(self.signature.inputs)

    def load_state_dict(self, state_dict, strict: bool = True):
        """New values for the model's state (a torch `state_dict()`, or any mapping of names to
        arrays), checked against the compiled shapes and dtypes and uploaded to the device.
        Names not given keep their values. Names the model does not have are an error, unless
        `strict=False` (as torch's: they are skipped). Returns torch's
        `(missing_keys, unexpected_keys)`."""
        specs = {name: (shape, dtype) for name, shape, dtype in self.signature.state}
        unknown = [k for k in state_dict if k not in specs]
        if unknown and strict:
            known = ", ".join(list(specs)[:8]) + (", ..." if len(specs) > 8 else "")
            raise SftError(f"load_state_dict: unknown names {unknown[:5]} (the model has {known})")
        for name, value in state_dict.items():
            if name not in specs:
                continue
            array = to_numpy(value)
            shape, dtype = specs[name]
            if tuple(array.shape) != shape or array.dtype != dtype:
                raise SftError(f"load_state_dict: '{name}' is {array.dtype}{list(array.shape)}, "
                               f"the model has {np.dtype(dtype)}{list(shape)}")
            if name in self._held:  # as the module takes it (`passes.hold_transposed`)
                array = held_array(array, self._held[name])
            # Kept as a copy until the module is loaded: the caller's tensors may change meanwhile.
            self._device_state[name] = (np.array(array, copy=True) if self._loaded is None
                                        else self._loaded.upload(array))
        return IncompatibleKeys([k for k in specs if k not in state_dict], unknown)

    def state_dict(self, names=None) -> dict:
        """The model's state as it is on the device now, as torch tensors by name (those in
        `names` only, where given)."""
        return {name: to_torch(user_array(to_host(value), self._held[name]) if name in self._held
                               else to_host(value))
                for name, value in self._device_state.items() if names is None or name in names}

    def take_state(self, source: "CompiledModel", names) -> None:
        """This program's state `names` set to `source`'s values on the device (two programs
        over one state: a data-parallel step's gradient and update programs), through the
        host where the two run on different drivers."""
        mine, theirs = self._device(), source._device()
        for name in names:
            value = source._device_state[name]
            if self._held.get(name) != source._held.get(name):  # through the host, relaid
                value = to_host(value)
                if name in source._held:
                    value = user_array(value, source._held[name])
                value = mine.upload(held_array(value, self._held[name]) if name in self._held else value)
            elif mine.driver != theirs.driver:
                value = mine.upload(to_host(value))
            self._device_state[name] = value

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise SftError(f"keyword arguments ({', '.join(kwargs)}) are not supported: the "
                           "compiled program takes its inputs positionally, in the order of the "
                           "example inputs")
        if self._mode is not None:
            self._check_mode()
        if self.signature.flatten is not None:
            args = tuple(self.signature.flatten(args))
        if self.inference_only:
            _refuse_autograd(args)
        loaded = self._device()
        arrays = check_inputs(args, self.signature.inputs, loaded.driver)
        state = [self._device_state[name] for name, _, _ in self.signature.state]
        flat = [*state, *arrays]
        if self._outputs_only:  # every result read back as the call returns it, nothing kept
            return assemble(loaded.call_on_device(*flat, host=True), args, self.signature)
        outs = loaded.call_on_device(*flat, *self._storage(loaded))
        self._recycle(flat)
        host = []
        for result, out in zip(self.signature.results or [None] * len(outs), outs):
            if result is not None and result.kind == "state":  # a buffer the model updates
                self._device_state[result.value] = out
                host.append(None)
            elif result is not None and result.kind == "device":  # a donated input's new value
                if isinstance(args[result.value], DeviceArray):
                    args[result.value].delete()  # donated: the caller is done with it
                host.append(DeviceArray(out, loaded.driver, self.signature.inputs[result.value][1]))
            else:
                host.append(to_host(out))
        return assemble(host, args, self.signature)


    def _storage(self, loaded) -> list:
        """The buffers this call's replaced values are written into: each result's spare, or
        a new one on the first call."""
        if not self._storage_pairs:  # the default: nothing written in place
            return []
        specs = argument_specs(self.signature)
        found = []
        for argument, result in self._storage_pairs:
            spare = self._spare.pop(result, None)
            found.append(spare if spare is not None else loaded.allocate(*specs[argument]))
        return found

    def _recycle(self, flat: list) -> None:
        """The buffers that held the values this call replaced become the next call's storage:
        the old state (this model's own: its readers, `state_dict`, copy) and donated inputs
        (deleted for the caller). A host array is not one (IREE copied it in); a buffer passed
        for two values serves one."""
        seen = set()
        for argument, result in self._storage_pairs:
            old = flat[argument]
            if not isinstance(old, np.ndarray) and id(old) not in seen:
                seen.add(id(old))
                self._spare[result] = old


def _refuse_autograd(args) -> None:
    """An SftError where autograd would record a torch input that requires grad: the compiled
    outputs carry no gradient back, so a loss built on them would train the rest of the graph
    and silently skip this part."""
    wants = [i for i, a in enumerate(args) if getattr(a, "requires_grad", False)]
    if not wants:
        return
    import torch

    if torch.is_grad_enabled():
        raise SftError(f"input {wants[0]} requires grad, but sft.compile's module computes values, "
                       "not gradients (its outputs would be cut from autograd): call it under "
                       "torch.no_grad() or on detached inputs, or train with "
                       "torch.compile(model, backend='sft') or sft.compile_train_step")

