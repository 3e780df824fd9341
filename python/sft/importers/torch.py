"""PyTorch nn.Module + example inputs -> linalg-on-tensors text, through torch.export and
torch-mlir's FX importer, with the signature that maps the compiled function's flat results
back to what the model returns."""

from __future__ import annotations

import contextlib
import re
import warnings

import numpy as np

from ..backend.torch_lowering import lower_isolated
from ..errors import SftError
from ..values import Result, Signature, spec_of
from .torch_export import export_decomposed

_FAILED_OP = re.compile(r"failed to legalize operation '([^']+)'")


@contextlib.contextmanager
def _modes_kept(model):
    """The model as it is for the export (train or eval: torch.export traces what the mode
    says), and every submodule's mode as it was afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


# Ops torch-mlir lowers right on uint8 (measured by the conformance suite): casts, comparisons,
# min/max, selection and views. Elsewhere it widens uint8 as if signed (a sum of [200, 255]
# wraps) or crashes (floor division).
_UINT8_SAFE = {"prims.convert_element_type.default", "aten._to_copy.default",
               "aten._assert_tensor_metadata.default", "aten.where.self", "aten.clone.default",
               "aten.amax.default", "aten.amin.default", "aten.max.dim", "aten.min.dim",
               "aten.maximum.default", "aten.minimum.default", "aten.cat.default",
               "aten.stack.default", "aten.view.default", "aten._unsafe_view.default",
               "aten.reshape.default", "aten.permute.default", "aten.transpose.int",
               "aten.expand.default", "aten.slice.Tensor", "aten.select.int",
               "aten.squeeze.dim", "aten.squeeze.dims", "aten.unsqueeze.default",
               "aten.alias.default", "aten.index.Tensor", "aten.gather.default"}
_UINT8_SAFE.update(f"aten.{cmp}.{kind}" for cmp in ("gt", "lt", "ge", "le", "eq", "ne")
                   for kind in ("Scalar", "Tensor"))
# Wrapping arithmetic that stays uint8 is the same bits signed or not.
_UINT8_WRAPPING = {f"aten.{op}.{kind}" for op in ("add", "sub", "mul") for kind in ("Scalar", "Tensor")}


# Ops that draw random numbers: a compiled program would replay one fixed draw, or none.
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "multinomial", "uniform", "exponential")


def refuse_train_mode_dropout(model, name: str, fix: str) -> None:
    """An SftError naming the first dropout module in train mode with p > 0: a compiled
    program cannot draw its random mask (yet)."""
    import torch

    for path, m in model.named_modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0:
            raise SftError(f"'{path or type(m).__name__}' is {type(m).__name__}(p={m.p}) in train "
                           f"mode: random ops are not supported in a compiled program; {fix}", name)


def refuse_random(graph, name: str, fix: str) -> None:
    """An SftError naming the first op of an FX graph that draws random numbers."""
    for node in graph.nodes:
        if node.op == "call_function" and any(r in str(node.target) for r in _RANDOM):
            raise SftError(f"the program draws random numbers ({node.target}): not supported in a "
                           f"compiled program; {fix}", name)


def _dtype_of(node):
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return getattr(val, "dtype", None)


def _float_to_uint8_through_int32(graph) -> None:
    """torch-mlir lowers a float -> uint8 conversion to `arith.fptosi f32 to i8`, which LLVM
    leaves undefined for 128..255: IREE's AVX2 code saturates them to 127 (AVX-512's happened
    to wrap). Converted through int32 (in range) and truncated, the bits are torch's."""
    import torch

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.prims.convert_element_type.default:
            continue
        source, dtype = node.args[0], node.args[1]
        if dtype != torch.uint8 or _dtype_of(source) is None or not _dtype_of(source).is_floating_point:
            continue
        with graph.inserting_before(node):
            wide = graph.call_function(torch.ops.prims.convert_element_type.default, (source, torch.int32))
        wide.meta["val"] = source.meta["val"].to(torch.int32)
        node.args = (wide, dtype)


def stateless_import(graph, gm, func_name: str) -> str:
    """linalg-on-tensors text of an FX graph whose placeholders are all arguments. torch-mlir's
    lowering of 8-bit integer programs can print an error and segfault: those run in a child."""
    import torch
    from torch_mlir import fx

    _float_to_uint8_through_int32(graph)
    gm.recompile()
    if any(_dtype_of(n) in (torch.int8, torch.uint8) for n in graph.nodes):
        raw = fx.stateless_fx_import(gm, output_type="raw", model_name=func_name)
        return lower_isolated(raw.operation.get_asm(enable_debug_info=False))
    module = fx.stateless_fx_import(gm, output_type="linalg-on-tensors", model_name=func_name)
    return module.operation.get_asm(enable_debug_info=False)


def import_error(exc: Exception, name: str, what: str) -> SftError:
    """One line for a failure of torch.export, aot_autograd or torch-mlir: the op torch-mlir
    could not lower, with its location when the message has one."""
    text = str(exc)
    match = _FAILED_OP.search(text)
    loc = re.search(r'loc\("([^"]+)":(\d+):(\d+)\)', text)
    where = f"{loc[1]}:{loc[2]}:{loc[3]}" if loc else name
    if match:
        return SftError(f"unsupported op '{match[1]}' (torch-mlir cannot lower it to linalg)", where)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if "_local_scalar_dense" in text or "DataDependent" in type(exc).__name__:
        frame = _user_frame(exc)
        if frame is not None:
            return SftError(f"could not {what}: Python code decides on a tensor's value (.item(), "
                            f"bool(), .all(), ...) at trace time: `{frame.line}`; compute it "
                            "without reading values, or state what holds with torch._check",
                            f"{frame.filename}:{frame.lineno}")
    return SftError(f"could not {what}: {first}", where)


def _user_frame(exc: BaseException):
    """The innermost frame of the user's code (not torch's, torch-mlir's, sft's or Python's
    own) in the tracebacks of `exc` and the exceptions it came from, or None."""
    import os
    import sysconfig
    import traceback

    skip = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sysconfig.get_paths()["stdlib"]]
    skip += [os.path.join(sysconfig.get_paths()["purelib"], p) for p in ("torch", "torch_mlir")]
    found, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for frame in traceback.extract_tb(exc.__traceback__):
            if not any(os.path.abspath(frame.filename).startswith(s) for s in skip):
                found = frame
        exc = exc.__cause__ or exc.__context__
    return found


def _refuse_wrong_uint8(prog, model_name: str) -> None:
    """uint8 where torch-mlir gets it right (see _UINT8_SAFE); any other op reading a uint8
    tensor is refused, naming it, rather than compiled to a wrong answer."""
    import torch

    for node in prog.graph.nodes:
        if node.op != "call_function":
            continue
        reads = [a for a in node.all_input_nodes if _dtype_of(a) == torch.uint8]
        target = str(node.target)
        if not reads or target in _UINT8_SAFE:
            continue
        if target in _UINT8_WRAPPING and _dtype_of(node) == torch.uint8:
            continue
        raise SftError(f"'{target}' on uint8 is not supported: torch-mlir reads uint8 as signed "
                       "there (a wrong answer); cast to int16 or int32 first", model_name)


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


def _numpy_dtype(node):
    """The numpy dtype of a uint8 output (IREE gives the bits back as int8), else None."""
    import torch

    return np.dtype(np.uint8) if node is not None and _dtype_of(node) == torch.uint8 else None


def _signature(prog, inputs, state: dict) -> Signature:
    """Which flat results are the model's outputs, constants, state or inputs updated in place."""
    from torch.export.graph_signature import ConstantArgument, OutputKind
    from torch.utils import _pytree

    user_inputs = list(prog.graph_signature.user_inputs)
    nodes = {n.name: n for n in prog.graph.nodes}
    results = []
    for spec in prog.graph_signature.output_specs:
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            results.append(Result("mutation", user_inputs.index(spec.target)))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            results.append(Result("state", spec.target))
        elif spec.kind == OutputKind.USER_OUTPUT and isinstance(spec.arg, ConstantArgument):
            results.append(Result("constant", spec.arg.value))
        elif spec.kind == OutputKind.USER_OUTPUT:
            results.append(Result("output", _numpy_dtype(nodes.get(spec.arg.name))))
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
    the state's values (torch tensors by name). The model is traced in the mode it is in, as
    torch.compile does: in train mode batch norm uses batch statistics and its running
    statistics are state the compiled model updates; dropout in train mode is refused (a
    compiled program draws no random numbers). The model's own object is left as it was."""
    import torch

    name = type(model).__name__
    if not isinstance(model, torch.nn.Module):
        raise SftError(f"expected a torch.nn.Module, got {name}")
    refuse_train_mode_dropout(model, name, "call model.eval() for inference")
    if isinstance(example_inputs, torch.Tensor):  # what most users mean by a bare tensor
        warnings.warn("sft.compile: example_inputs is one tensor, taken as the one input (x,); "
                      "pass a tuple to silence this", stacklevel=4)
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, dict):
        raise SftError("example_inputs must be a tuple of positional inputs; keyword inputs are "
                       "not supported (write a forward that takes them positionally)", name)
    inputs = tuple(example_inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise SftError(f"example input {i} must be a torch tensor, not {type(x).__name__}")
        if x.is_meta:
            raise SftError(f"example input {i} is a meta tensor: sft runs the model's export on "
                           "real values; pass a tensor on the CPU (torch.empty works)", name)
    meta = next((n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta), None)
    if meta is not None:
        raise SftError(f"the model's '{meta}' is a meta tensor: it has no values to compile with; "
                       "load weights first (model.to_empty(device='cpu') then load_state_dict)", name)
    try:
        with warnings.catch_warnings(), _modes_kept(model):
            warnings.simplefilter("ignore")
            prog = export_decomposed(model, inputs, name)
            _refuse_wrong_uint8(prog, name)
            refuse_random(prog.graph, name, "call model.eval() for inference")
            state = _state(prog, name)
            text = stateless_import(prog.graph, prog.graph_module, func_name)
    except SftError:
        raise
    except Exception as exc:  # torch.export or torch-mlir failed: name the op where we can
        raise import_error(exc, name, "import the model") from None
    return text, _signature(prog, inputs, state), state
