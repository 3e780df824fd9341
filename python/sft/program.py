"""A model stated in sft: the front ends' output raised, with what calling it needs (its
signature and state), and the lowering of a plan back to the linalg IREE compiles."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import ir
from .errors import SftError
from .importers import import_mlir_file, import_mlir_text, import_torch
from .passes import LowerPass, RaisePass, SumLoneLoopsPass, VerifyPass
from .decisions.kind import IREE, SFT
from .passes.apply_plan import DropOpIdsPass
from .passes.f64_math import ExpandF64MathPass
from .passes.output_storage import OutputStoragePass
from .plan import Plan
from .targets.base import Target
from .values import NP_TYPES, Signature, aliases, argument_specs, storage_pairs, to_numpy


def to_sft(linalg_text: str, filename: str = "<input>"):
    """Parse linalg text into sft's context and raise it; returns the module."""
    module = ir.parse(ir.sft_context(), linalg_text, filename)
    ir.verify(module, filename)
    RaisePass()(module)  # sft ops already in the input stay as they are
    SumLoneLoopsPass()(module)  # (every program sft states has none: `passes.lone_sums`)
    VerifyPass()(module)
    return module


def lower(sft_module, plan: Plan, target: Target) -> tuple[str, str]:
    """sft -> linalg text for `target`, then the plan imposed in IREE's context; returns
    (lowered, planned). Consumes the module."""
    for sft_pass in plan.passes(SFT):
        sft_pass(sft_module)
    LowerPass()(sft_module)
    if target.expand_f64_math:
        ExpandF64MathPass()(sft_module)
    lowered = ir.print_module(sft_module)
    iree_module = ir.parse(ir.iree_ir.Context(), lowered, "")
    for iree_pass in plan.passes(IREE):
        iree_pass(iree_module)
    DropOpIdsPass()(iree_module)
    return lowered, ir.print_module(iree_module)


def entry_function(module, filename: str = "<input>"):
    """The function a module is called through: `@main`, else its only public function."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    public = [f for f in funcs if "sym_visibility" not in f.attributes
              or ir.tm.StringAttr(f.attributes["sym_visibility"]).value == "public"]
    names = [ir.tm.StringAttr(f.attributes["sym_name"]).value for f in public]
    if "main" in names:
        return public[names.index("main")]
    if len(public) == 1:
        return public[0]
    if not public:
        raise SftError("the module has no public func.func to call", filename)
    raise SftError(f"the module has {len(public)} public functions ({', '.join('@' + n for n in names)}) "
                   "and none is @main: which one to call is ambiguous", filename)


def module_signature(module, filename: str = "<input>") -> tuple[Signature, str]:
    """The entry function's arguments (static shapes required) and its name."""
    func = entry_function(module, filename)
    name = ir.tm.StringAttr(func.attributes["sym_name"]).value
    specs = []
    for i, arg in enumerate(func.regions[0].blocks[0].arguments):
        loc = ir.where(func.location) or filename
        if not isinstance(arg.type, ir.tm.RankedTensorType):
            raise SftError(f"argument {i} of @{name} is {arg.type}: only ranked tensors are supported", loc)
        ty = ir.tm.RankedTensorType(arg.type)
        if not ty.has_static_shape:
            raise SftError(f"argument {i} of @{name} is {ty}: dynamic shapes are not supported; "
                           "compile for the shapes it will be called with", loc)
        if str(ty.element_type) not in NP_TYPES:
            raise SftError(f"argument {i} of @{name} is {ty}: element type {ty.element_type} "
                           "is not supported", loc)
        specs.append((tuple(ty.shape), np.dtype(NP_TYPES[str(ty.element_type)])))
    return Signature(tuple(specs)), name


def _is_mlir_path(model) -> bool:
    return isinstance(model, Path) or (isinstance(model, str) and model.endswith(".mlir")
                                       and "\n" not in model)


def _torch_function(example_inputs) -> bool:
    """Whether a plain function's example inputs are torch tensors (else it is a JAX function)."""
    leaves = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    return any(type(x).__module__.startswith("torch") for x in leaves)


def _FunctionModule(fn):
    """A torch.nn.Module whose forward is `fn` (named after it in errors)."""
    import torch

    class Function(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    Function.__name__ = getattr(fn, "__name__", "function")
    return Function()


def import_model(model, example_inputs=(), donate_argnums=()) -> tuple[str, str, Signature | None, dict]:
    """(linalg text, a name for error messages, the front end's signature or None, the state
    by name) for a torch module, a JAX function, MLIR text or an .mlir path. `donate_argnums`
    (JAX functions only) as `jax.jit`'s."""
    if isinstance(donate_argnums, int):  # jax.jit takes one position as an int too
        donate_argnums = (donate_argnums,)
    function = callable(model) and not hasattr(model, "state_dict") and not _is_mlir_path(model) \
        and not isinstance(model, str)
    # a plain function of torch tensors is compiled as torch.compile takes one: as a module
    is_jax = function and not _torch_function(example_inputs)
    if function and not is_jax:
        model = _FunctionModule(model)
    if donate_argnums and not is_jax:
        raise SftError("donate_argnums is for JAX functions: a torch module's state stays on "
                       "the device already (compile_train_step for training)")
    if _is_mlir_path(model):
        return import_mlir_file(model), str(model), None, {}
    if isinstance(model, str):
        return import_mlir_text(model), "<input>", None, {}
    if is_jax:  # a function, not a torch module
        from .importers.jax import import_jax

        text, signature = import_jax(model, example_inputs, tuple(donate_argnums))
        return text, getattr(model, "__name__", type(model).__name__), signature, {}
    text, signature, state = import_torch(model, example_inputs)
    return text, type(model).__name__, signature, state


@dataclass
class Program:
    """A model in the sft dialect, ready to be searched and lowered.

    `sft_text` is the program's structure only (ops, shapes, dtypes: weights are arguments), so
    its hash is the search's workload key. `state` holds the values of the arguments that come
    before the user's inputs (parameters, buffers), as numpy arrays by name."""

    name: str
    linalg: str
    sft_text: str
    signature: Signature
    entry: str
    state: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # time spent per phase so far

    @property
    def workload(self) -> str:
        return hashlib.sha256(self.sft_text.encode()).hexdigest()[:24]

    def module(self):
        """A fresh sft module of the program (lowering consumes one)."""
        return to_sft(self.sft_text, self.name)

    def timing_inputs(self) -> list[np.ndarray]:
        """Arguments to time the program on: its state, then random user inputs."""
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                  else np.zeros(shape, dtype) for shape, dtype in self.signature.inputs]
        return [*self.state.values(), *inputs]

    def timing_layout(self, target: Target) -> tuple[tuple[int, ...], tuple[int, ...], tuple]:
        """(keep, resident, storage) to time the program as the compiled object calls it
        (`backend.timing.loaded_call`): the results that are new state stay on the device; the
        state and the donated arguments are uploaded once; the (shape, dtype) of each output
        storage argument `for_iree` adds."""
        carried = aliases(self.signature)
        specs = argument_specs(self.signature)
        storage = tuple(specs[a] for a, _ in self.storage_pairs(target))
        return tuple(carried.values()), tuple(sorted({*range(len(self.state)), *carried})), storage

    def storage_pairs(self, target: Target) -> list[tuple[int, int]]:
        """(argument, result) of each output storage argument the program takes on `target`."""
        return storage_pairs(self.signature) if target.state_in_place else []

    def for_iree(self, text: str, target: Target) -> str:
        """`text` (the program lowered under a plan, or as imported) as IREE compiles it for
        `target`: with an output storage argument per value a call replaces, where the target
        writes them in place (`Target.state_in_place`, `passes.output_storage`)."""
        pairs = self.storage_pairs(target)
        if not pairs:
            return text
        module = ir.parse(ir.iree_ir.Context(), text, self.name)
        OutputStoragePass(self.entry, tuple(r for _, r in pairs))(module)
        return ir.print_module(module)


def prepare(model, example_inputs=(), donate_argnums=()) -> tuple[Program, object]:
    """Import and raise a model; returns the Program and its raised sft module (which the
    caller may consume once, saving a parse)."""
    start = time.perf_counter()
    imported = import_model(model, example_inputs, donate_argnums)
    return program_from(*imported, import_seconds=time.perf_counter() - start)


def program_from(linalg: str, name: str, signature: Signature | None, state: dict,
                 import_seconds: float = 0.0) -> tuple[Program, object]:
    """Raise a front end's output (linalg text whose function takes `state`'s values, then the
    inputs `signature` describes); returns the Program and its raised sft module."""
    start = time.perf_counter()
    module = to_sft(linalg, name)
    arguments, entry = module_signature(module, name)
    if signature is None:
        signature = arguments
    elif len(arguments.inputs) != len(signature.state) + len(signature.inputs):
        raise SftError(f"the imported function takes {len(arguments.inputs)} arguments, the "
                       f"model {len(signature.state)} state tensors and {len(signature.inputs)} inputs", name)
    program = Program(name, linalg, ir.print_module(module), signature, entry,
                      {k: to_numpy(v) for k, v in state.items()},
                      {"import": import_seconds, "raise": time.perf_counter() - start})
    return program, module
