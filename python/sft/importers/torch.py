"""PyTorch nn.Module + example inputs -> linalg-on-tensors text, through torch.export and
torch-mlir's FX importer, with the signature that maps the compiled function's flat results
back to what the model returns."""

from __future__ import annotations

import contextlib
import re
import warnings

from ..errors import SftError
from ..values import Result, Signature, spec_of

_FAILED_OP = re.compile(r"failed to legalize operation '([^']+)'")


@contextlib.contextmanager
def _evaluating(model):
    """The model in eval mode for the export, and the user's object as it was afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def _refuse_uint8(prog, model_name: str) -> None:
    """torch-mlir reads uint8 as signed int8 (sum of [200, 255] wraps) and crashes on some of
    its ops: refuse it rather than return a wrong answer."""
    import torch

    for node in prog.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (tuple, list)) else [vals]:
            if isinstance(v, torch.Tensor) and v.dtype == torch.uint8:
                what = f"input '{node.name}'" if node.op == "placeholder" else f"op '{node.target}'"
                raise SftError(f"uint8 tensors are not supported ({what}): torch-mlir reads them "
                               "as signed int8; cast to int16 or int32", model_name)


def _state(prog, model_name: str) -> dict:
    """The program's state, in argument order: parameters, buffers (persistent or not) and the
    constant tensors torch.export lifted, by name. They come before the user's inputs."""
    from torch.export.graph_signature import InputKind

    state, user_seen = {}, False
    for spec in prog.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            user_seen = True
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise SftError(f"unsupported graph input '{spec.arg.name}' ({spec.kind.name})", model_name)
        if user_seen:
            raise SftError(f"state input '{spec.target}' after the user's inputs", model_name)
        value = prog.state_dict[spec.target] if spec.target in prog.state_dict else prog.constants[spec.target]
        state[spec.target] = value.detach()
    return state


def _signature(prog, inputs, state: dict) -> Signature:
    """Which flat results are the model's outputs, constants, state or inputs updated in place."""
    from torch.export.graph_signature import ConstantArgument, OutputKind
    from torch.utils import _pytree

    user_inputs = list(prog.graph_signature.user_inputs)
    results = []
    for spec in prog.graph_signature.output_specs:
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            results.append(Result("mutation", user_inputs.index(spec.target)))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            results.append(Result("state", spec.target))
        elif spec.kind == OutputKind.USER_OUTPUT and isinstance(spec.arg, ConstantArgument):
            results.append(Result("constant", spec.arg.value))
        elif spec.kind == OutputKind.USER_OUTPUT:
            results.append(Result("output"))
        else:
            results.append(Result("dropped"))
    out_spec = prog.call_spec.out_spec
    return Signature(tuple(spec_of(x) for x in inputs), tuple(results),
                     lambda leaves: _pytree.tree_unflatten(leaves, out_spec),
                     tuple((name, *spec_of(v)) for name, v in state.items()))


def import_torch(model, example_inputs, func_name: str = "main") -> tuple[str, Signature, dict]:
    """Export `model` at `example_inputs`' shapes and lower it to linalg-on-tensors text whose
    function takes the model's state (parameters, buffers, lifted constants) as its first
    arguments, so that no weight is printed into the IR. Returns the text, the signature and
    the state's values (torch tensors by name). The model's own object is left as it was (its
    train/eval mode included)."""
    import torch
    from torch_mlir import fx

    name = type(model).__name__
    if not isinstance(model, torch.nn.Module):
        raise SftError(f"expected a torch.nn.Module, got {name}")
    inputs = tuple(example_inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise SftError(f"example input {i} must be a torch tensor, not {type(x).__name__}")
    try:
        with warnings.catch_warnings(), _evaluating(model):
            warnings.simplefilter("ignore")
            prog = torch.export.export(model, inputs, strict=False)
            prog = prog.run_decompositions(fx.get_decomposition_table())
            _refuse_uint8(prog, name)
            state = _state(prog, name)
            module = fx.stateless_fx_import(prog.graph_module, output_type="linalg-on-tensors",
                                            model_name=func_name)
    except SftError:
        raise
    except Exception as exc:  # torch.export or torch-mlir failed: name the op where we can
        text = str(exc)
        match = _FAILED_OP.search(text)
        loc = re.search(r'loc\("([^"]+)":(\d+):(\d+)\)', text)
        where = f"{loc[1]}:{loc[2]}:{loc[3]}" if loc else name
        if match:
            raise SftError(f"unsupported op '{match[1]}' (torch-mlir cannot lower it to linalg)",
                           where) from None
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        raise SftError(f"could not import the model: {first}", where) from None
    text = module.operation.get_asm(enable_debug_info=False)
    return text, _signature(prog, inputs, state), state
