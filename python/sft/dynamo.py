"""`torch.compile(model, backend="sft")`: sft as a TorchDynamo backend.

    compiled = torch.compile(model, backend="sft", options={"search": "model"})
    loss = loss_fn(compiled(x), y); loss.backward(); optimizer.step()   # any optimizer

Dynamo captures the graphs (graph breaks run eager, and its guards compile again on a new
shape); AOTAutograd splits each into a forward and, where inputs require gradients, a backward
graph, both decomposed with torch-mlir's table; sft compiles each graph (search included) with
`compile_graph`. The optimizer, schedulers, clipping, accumulation stay the user's own eager
code, so they work by construction. Using the backend turns Dynamo's automatic dynamic shapes
off (`torch._dynamo.config.automatic_dynamic_shapes`): a new shape is compiled for itself, as
sft compiles static shapes only. Parameters are graph inputs here (Dynamo lifts them), so
they cross to the device at each call: `sft.compile_train_step` is the whole-step path that
keeps them there.

Options (`options={...}`): `search` ("none", "model", "verify"), `target`, `precision`, as
`sft.compile` takes them. Registered through the `torch_dynamo_backends` entry point."""

from __future__ import annotations

import warnings

import numpy as np

from .errors import SftError
from .values import Result, Signature

_OPTIONS = ("search", "target", "precision")
_SETUP = []


def _setup_once() -> None:
    """Dynamo's automatic dynamic shapes off: sft compiles static shapes only, so a new batch
    size (the last, smaller batch) is compiled again for its shape rather than traced with a
    symbolic one, which sft would have to run eager. And no leak report at exit for the
    compiled graphs Dynamo caches."""
    import atexit

    import torch

    from .backend.runtime import silence_exit_leak_report

    if not _SETUP:
        torch._dynamo.config.automatic_dynamic_shapes = False
        atexit.register(silence_exit_leak_report)
        _SETUP.append(True)


def backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """The Dynamo backend: AOTAutograd with sft compiling the forward and backward graphs."""
    from torch._dynamo.backends.common import aot_autograd
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch_mlir import fx

    _setup_once()
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise SftError(f"torch.compile(backend='sft'): unknown option {unknown[0]!r} "
                       f"(options: {', '.join(_OPTIONS)})")
    from .search.strategy import check_precision
    from .targets import get_target

    search = options.get("search", "none")
    if search not in ("none", "model", "verify"):
        raise SftError(f"torch.compile(backend='sft'): search must be 'none', 'model' or 'verify', "
                       f"not {search!r}")
    check_precision(options.get("precision", "f32"), search)
    options["target"] = get_target(options.get("target", "host"))
    compiler = lambda graph, inputs: compile_graph(graph, inputs, **options)  # noqa: E731
    # attention traced as its math: the CPU flash kernel's backward has no torch-mlir lowering
    with sdpa_kernel(SDPBackend.MATH):
        return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                            decompositions=fx.get_decomposition_table())(gm, example_inputs)


def compile_graph(gm, example_inputs, target, search: str = "none", precision: str = "f32"):
    """`_compile_graph` outside AOTAutograd's fake-tensor mode (sft's import, search and IREE
    work on real values)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _compile_graph(gm, example_inputs, target, search, precision)


def _compile_graph(gm, example_inputs, target, search: str, precision: str):
    """An FX graph of aten ops whose placeholders are all tensors (AOTAutograd's forward or
    backward), compiled by sft; returns a boxed callable as AOTAutograd calls it. A graph with
    symbolic shapes, or one sft cannot lower, runs as it is (eager), with one warning."""
    import torch
    from torch._functorch.aot_autograd import make_boxed_func

    from .api import compile_prepared
    from .importers.torch import import_error, refuse_random, stateless_import
    from .program import program_from

    eager = make_boxed_func(gm.forward)
    specs = []
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor) or any(not isinstance(d, int) for d in x.shape):
            warnings.warn(f"sft: graph input {i} is {type(x).__name__} of symbolic or no shape; "
                          "this graph runs eager (torch.compile(..., dynamic=False) keeps shapes "
                          "static)", stacklevel=2)
            return eager
        try:
            specs.append((tuple(x.shape), _numpy_dtype(x.dtype)))
        except TypeError:
            warnings.warn(f"sft: graph input {i} is {x.dtype}, which sft does not compile; this "
                          "graph runs eager", stacklevel=2)
            return eager
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    # None results (no gradient for an input that needs none) are not the program's: kept aside
    kept = [i for i, r in enumerate(results) if r is not None]
    if any(not isinstance(results[i], torch.fx.Node) for i in kept):
        warnings.warn("sft: a graph returns a non-tensor value; it runs eager", stacklevel=2)
        return eager
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            graph.output(tuple(env[results[i]] for i in kept))
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    flat = torch.fx.GraphModule(gm, graph)
    name = "torch_compile_graph"
    try:
        # a compiled program would replay one draw: random ops (train-mode dropout) run eager
        refuse_random(flat.graph, name, "this graph runs eager")
        text = stateless_import(flat.graph, flat, "main")
        signature = Signature(tuple(specs), tuple(Result("output", _unsigned(results[i])) for i in kept))
        program, module = program_from(text, name, signature, {})
        compiled = compile_prepared(program, module, target, None, search, False, precision)
    except Exception as exc:  # noqa: BLE001 — torch-mlir's own errors too: the graph runs eager
        error = exc if isinstance(exc, SftError) else import_error(exc, name, "import the graph")
        warnings.warn(f"sft: a graph could not be compiled ({error.message.splitlines()[0]}); "
                      "it runs eager", stacklevel=2)
        return eager
    count = len(results)

    def run(args):
        outs = compiled(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        full = [None] * count
        for i, value in zip(kept, outs):
            full[i] = value
        return full

    run._boxed_call = True
    run.compiled = compiled  # for inspection: plan, search report, dispatches
    return run


def _numpy_dtype(dtype) -> np.dtype:
    """numpy's dtype for a torch dtype (bfloat16 from ml_dtypes, as IREE's runtime reads it)."""
    import ml_dtypes

    name = str(dtype).removeprefix("torch.")
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _unsigned(node):
    """numpy's uint8 for a uint8 result (IREE gives the bits back as i8), else None."""
    import torch

    val = node.meta.get("val")
    return np.dtype(np.uint8) if getattr(val, "dtype", None) == torch.uint8 else None
