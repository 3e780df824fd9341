"""A PyTorch training step (forward, loss, backward and the optimizer's update) traced as one
functional program and lowered to linalg-on-tensors text.

Forward and backward are aot_autograd's joint graph of the model and its loss
(`aot_export_module(..., trace_joint=True)` with torch-mlir's decompositions), which states the
buffer updates of a train-mode forward (batch norm's running statistics) as outputs: a
`torch.func.grad_and_value` of `functional_call`, traced by make_fx, drops them (the in-place
update inside `native_batch_norm` never reaches the graph). The update is written out: SGD and
Adam/AdamW as `torch.optim` computes them on CPU (the single-tensor, non-capturable path). The
two are traced together by `make_fx` and imported by `torch_mlir.fx.stateless_fx_import`.

The program's arguments are the state (trained parameters, frozen parameters and buffers,
optimizer state, the step count) then the batch; its results are the loss, then each state
tensor the step changes. The optimizer's hyper-parameters are inputs after the batch
(`torch_optim`: read from `param_groups` at each call)."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

from ..errors import SftError
from ..values import Result, Signature, spec_of
from .dropout import counter_dropout, train_mode_dropouts
from .torch import import_error, refuse_random, stateless_import
from .torch_export import exporting
from .torch_optim import Update, optimizer_kind, read_update
from .torch_step import split_functions, step_function, micro_batch

@dataclass
class TrainGraph:
    """What tracing a step gives: the linalg text, the signature (state: parameters, buffers,
    optimizer state; inputs: the batch, then the hyper-parameters; results: the loss, then the
    updated state) and the state's initial values (torch tensors by name, in argument order)."""

    linalg: str
    signature: Signature
    state: dict
    parameters: tuple[str, ...]  # the trained parameters' names (model-style)
    buffers: tuple[str, ...]     # the model's buffers (and frozen parameters) the step reads
    update: Update
    batch_size: int = 0          # how many of the inputs are the batch (the rest: hyper-parameters)
    seeded: bool = False         # the last input is the dropout seed (importers/dropout.py)


def optimizer_state(optimizer, update: Update, named: dict) -> tuple[dict, float]:
    """The optimizer's per-parameter state (`<slot>.<param>`) for the trained parameters of
    `named` (name -> parameter) where it has taken steps already, else zeros; and the step
    count."""
    import torch

    slots, steps = {}, set()
    for group in update.groups:
        for pname in group.params:
            p = named[pname]
            st = optimizer.state.get(p, {})
            for slot in update.slots(group):
                value = st.get(slot)
                slots[f"{slot}.{pname}"] = (torch.zeros_like(p) if value is None else value).detach().clone()
            if "step" in st:
                steps.add(float(st["step"]))
            elif update.slots(group):  # SGD counts no steps; a buffer means it has taken one
                steps.add(1.0 if st.get("momentum_buffer") is not None else 0.0)
    if len(steps) > 1:
        raise SftError("the optimizer's parameters have taken different numbers of steps")
    return slots, steps.pop() if steps else 0.0


def trace_train_step(model, loss_fn, optimizer, example_batch, func_name: str = "main",
                     max_grad_norm: float | None = None, accumulation_steps: int = 1,
                     split: bool = False) -> "TrainGraph | SplitTrainGraph":
    """Trace one training step of `model` (in the mode it is in) with `loss_fn(model(*inputs),
    target)` and `optimizer`'s rule, at `example_batch = (*inputs, target)`'s shapes, and lower
    it to linalg-on-tensors. `max_grad_norm`: the gradients are clipped to that global 2-norm
    first, as `torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)` clips them.
    `accumulation_steps` k: the batch runs as k micro-batches (`torch.chunk` along dim 0), the
    gradients of each micro-batch's loss / k summed before the one update (`accumulate`).
    `split`: two programs, split where the gradients are complete (`SplitTrainGraph`).
    The user's model and optimizer are not changed."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch_mlir import fx

    name = type(model).__name__
    if not isinstance(model, torch.nn.Module):
        raise SftError(f"expected a torch.nn.Module, got {name}")
    batch = tuple(example_batch)
    if len(batch) < 2:
        raise SftError("example_batch must be (*inputs, target): at least two tensors", name)
    for i, x in enumerate(batch):
        if not isinstance(x, torch.Tensor):
            raise SftError(f"example_batch[{i}] must be a torch tensor, not {type(x).__name__}", name)
    optimizer_kind(optimizer)  # refused before the trace where it cannot be compiled
    if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float)) and max_grad_norm > 0):
        raise SftError(f"max_grad_norm must be a positive number, not {max_grad_norm!r}", name)
    micro = micro_batch(batch, accumulation_steps, name)
    dropouts = train_mode_dropouts(model, name)
    params = dict(model.named_parameters())
    ids = {id(p) for p in params.values()}
    opt_params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(id(p) not in ids for p in opt_params):
        raise SftError("the optimizer holds tensors that are not parameters of the model", name)
    try:
        with warnings.catch_warnings(), sdpa_kernel(SDPBackend.MATH), exporting(), \
                _cumulative_batch_norms(model), counter_dropout(dropouts) as rng:
            warnings.simplefilter("ignore")
            seed = (torch.tensor(0, dtype=torch.int64),) if dropouts else ()
            joint = _joint(model, loss_fn, (*micro, *seed), fx.get_decomposition_table(), name,
                           rng if dropouts else None)
            if joint.aux and accumulation_steps > 1:
                raise SftError("a loss_fn returning (loss, *aux) is not supported with "
                               "accumulation_steps > 1: return the loss alone", name)
            # torch.optim steps the parameters that it holds and that get a gradient; the others
            # (frozen, or unused by the loss) and the buffers are read, never updated, except
            # the buffers the forward updates (batch norm's running statistics).
            held = {id(p) for p in opt_params}
            trained = {n: p for n, p in params.items() if id(p) in held and n in joint.grads}
            if not trained:
                raise SftError("the optimizer trains none of the model's parameters", name)
            update = read_update(optimizer, {id(p): n for n, p in trained.items()})
            fixed = {**{n: p for n, p in params.items() if n not in trained},
                     **dict(model.named_buffers())}
            slots, steps = optimizer_state(optimizer, update, trained)
            state = {**{n: v.detach().clone() for n, v in [*trained.items(), *fixed.items()]},
                     **slots, "step": torch.tensor(steps, dtype=torch.float32)}
            if len(state) != len(trained) + len(fixed) + len(slots) + 1:
                raise SftError("a model parameter or buffer is named like the optimizer's state "
                               "('step', 'exp_avg.*', ...)", name)
            hyper = [torch.tensor(v, dtype=torch.float64)
                     for v in update.hyper_inputs(optimizer, steps + 1)]
            mutated = [b for b in fixed if b in joint.mutated]
            # the trained parameters come back group by group, as the update visits them
            results = [*(k for g in update.groups for k in g.params), *mutated, *slots, "step"]
            if split:
                return _trace_split(joint, update, state, list(trained), list(fixed), slots,
                                    batch, hyper, seed, mutated, max_grad_norm,
                                    accumulation_steps, func_name, name)
            step_fn = step_function(joint, update, list(state), len(batch), results, max_grad_norm,
                                     accumulation_steps, bool(seed))
            gm = make_fx(step_fn,
                         decomposition_table=fx.get_decomposition_table())(*state.values(), *batch, *hyper, *seed)
            refuse_random(gm.graph, name, "set dropout's p=0")
            text = stateless_import(gm.graph, gm, func_name)
    except SftError:
        raise
    except Exception as exc:  # aot_autograd, make_fx or torch-mlir failed: name the op where we can
        raise import_error(exc, name, "trace the training step") from None
    signature = Signature(tuple(spec_of(x) for x in (*batch, *hyper, *seed)),
                          (*[Result("output")] * (1 + len(joint.aux)), *[Result("state", n) for n in results]),
                          None, tuple((n, *spec_of(v)) for n, v in state.items()))
    return TrainGraph(text, signature, state, tuple(trained), tuple(fixed), update, len(batch), bool(seed))


@dataclass
class SplitTrainGraph:
    """A step traced as two programs (`trace_train_step(split=True)`): `gradients` (state: the
    trained parameters and the buffers; inputs: the batch[, seed]; results: the loss, the
    loss function's other results, the gradient of each trained parameter in
    `gradients.parameters` order, then the buffers the forward updates as state) and `update`
    (state: the trained parameters, the optimizer's state, the step count; inputs: those
    gradients, then the hyper-parameters; results: the new state)."""

    gradients: TrainGraph
    update: TrainGraph


def _trace_split(joint, update: Update, state: dict, trained: list, fixed: list, slots: dict,
                 batch: tuple, hyper: list, seed: tuple, mutated: list,
                 max_grad_norm, accumulation_steps: int, func_name: str, name: str) -> SplitTrainGraph:
    """Trace and import the step's two programs (`SplitTrainGraph`)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_mlir import fx

    grad_state = [*trained, *fixed]
    update_state = [*trained, *slots, "step"]
    results = [*(k for g in update.groups for k in g.params), *slots, "step"]
    gradients_fn, update_fn = split_functions(joint, update, grad_state, update_state, trained,
                                               len(batch), results, max_grad_norm,
                                               accumulation_steps, bool(seed))
    table = fx.get_decomposition_table()
    # a gradient is shaped as its parameter; another tensor object, or make_fx traces both
    # arguments as one
    grads = [torch.zeros_like(state[p]) for p in trained]
    gm = make_fx(gradients_fn, decomposition_table=table)(*[state[n] for n in grad_state], *batch, *seed)
    refuse_random(gm.graph, name, "set dropout's p=0")
    grad_text = stateless_import(gm.graph, gm, func_name)
    gm = make_fx(update_fn, decomposition_table=table)(*[state[n] for n in update_state], *grads, *hyper)
    update_text = stateless_import(gm.graph, gm, func_name)
    specs = lambda names: tuple((n, *spec_of(state[n])) for n in names)  # noqa: E731
    outputs = [Result("output")] * (1 + len(joint.aux) + len(trained))
    gradients = TrainGraph(grad_text, Signature(tuple(spec_of(x) for x in (*batch, *seed)),
                                                (*outputs, *[Result("state", b) for b in mutated]),
                                                None, specs(grad_state)),
                           {n: state[n] for n in grad_state}, tuple(trained), tuple(fixed), update,
                           len(batch), bool(seed))
    stepped = TrainGraph(update_text, Signature(tuple(spec_of(x) for x in (*grads, *hyper)),
                                                tuple(Result("state", n) for n in results),
                                                None, specs(update_state)),
                         {n: state[n] for n in update_state}, tuple(trained), (), update)
    return SplitTrainGraph(gradients, stepped)


@dataclass
class _Joint:
    """aot_autograd's joint graph of the model and its loss: `gm(*parameters, *buffers, *batch)`
    returns the outputs named `outputs`: buffer updates, the loss, the loss function's other
    results (`aux`, detached), the gradients. Parameters are named as the model's
    `named_parameters()` names them: a tied parameter (one tensor under two names) is one
    parameter, its gradient the sum of its uses'."""

    gm: object
    parameters: list[str]
    buffers: list[str]
    outputs: list[str]
    loss: str
    aux: list[str]
    grads: dict      # parameter name -> output names (more than one for a tied parameter)
    mutated: dict    # buffer name -> output name


@contextlib.contextmanager
def _cumulative_batch_norms(model):
    """Train-mode batch norms with `momentum=None` (a cumulative average of the batch
    statistics) traced with the average's factor 1 / num_batches_tracked as a tensor: torch's
    own forward reads it as a Python float (`aten._local_scalar_dense`)."""
    import torch
    import torch.nn.functional as F

    def forward_of(bn):
        def forward(x):
            bn._check_input_dim(x)
            bn.num_batches_tracked.add_(1)
            y = F.batch_norm(x, None, None, bn.weight, bn.bias, True, 0.0, bn.eps)
            with torch.no_grad():
                factor = 1.0 / bn.num_batches_tracked
                dims = [0, *range(2, x.dim())]
                bn.running_mean.mul_(1 - factor).add_(x.mean(dims) * factor)
                bn.running_var.mul_(1 - factor).add_(x.var(dims, unbiased=True) * factor)
            return y
        return forward

    found = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
             and m.training and m.momentum is None and m.track_running_stats]
    for bn in found:
        bn.forward = forward_of(bn)
    try:
        yield
    finally:
        for bn in found:
            del bn.forward  # the class's forward again


@contextlib.contextmanager
def _real_tensors_as_constants():
    """Tensors the model or the loss captures (a plain tensor attribute, a loss's class weights
    in a closure) traced as constants of the graph, as torch.export lifts them; aot_autograd
    otherwise refuses any tensor it did not make fake itself (the thread-local override is
    dynamo's own way to allow them)."""
    from torch._subclasses.fake_tensor import fake_tensor_tls

    old = fake_tensor_tls.allow_non_fake_inputs_override
    fake_tensor_tls.allow_non_fake_inputs_override = True
    try:
        yield
    finally:
        fake_tensor_tls.allow_non_fake_inputs_override = old


@contextlib.contextmanager
def _without_gradient(model, names):
    """The parameters named `names` (the loss does not reach them) without a gradient for the
    trace, and as they were afterwards. Under each such name the module holds, for the trace, a
    frozen parameter sharing the storage: a tied parameter that the loss reaches under another
    name keeps its gradient there."""
    import torch

    held = []
    for name in names:
        prefix, _, key = name.rpartition(".")
        module = model.get_submodule(prefix)
        held.append((module, key, module._parameters[key]))
    try:
        for module, key, p in held:
            module._parameters[key] = torch.nn.Parameter(p.detach(), requires_grad=False)
        yield
    finally:
        for module, key, p in held:
            module._parameters[key] = p


def _joint(model, loss_fn, batch, decompositions, name: str, rng: dict | None = None) -> _Joint:
    """Trace the joint graph. Parameters the loss does not reach (eager gives them no gradient
    and the optimizer leaves them) are traced as frozen: aot_autograd refuses them otherwise.
    With `rng` (`dropout.counter_dropout`'s holder) the last tensor of `batch` is the dropout
    seed, an input of the graph like the batch."""
    import torch
    from torch._functorch.aot_autograd import aot_export_module

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self._loss = (loss_fn,)  # a tuple: not registered as a child module

        def forward(self, *args):
            if rng is not None:  # the seed, for the model's dropout
                rng.update(seed=args[-1], site=0)
                args = args[:-1]
            out = self._loss[0](self.model(*args[:-1]), args[-1])
            loss, aux = (out[0], tuple(out[1:])) if isinstance(out, (tuple, list)) and out else (out, ())
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise SftError(f"loss_fn must return a 0-d tensor (or a tuple starting with one), "
                               f"got {getattr(loss, 'shape', type(loss).__name__)}", name)
            if not all(isinstance(a, torch.Tensor) for a in aux):
                raise SftError("loss_fn's other results must be tensors", name)
            return (loss, *(a.detach() for a in aux))

    def trace(joint: bool):
        with _real_tensors_as_constants():
            return aot_export_module(WithLoss(), batch, trace_joint=joint,
                                     output_loss_index=0 if joint else None,
                                     decompositions=decompositions)

    try:
        gm, sig = trace(True)
    except (RuntimeError, AssertionError) as exc:  # torch asserts it
        if "did not receive a gradient" not in str(exc):
            raise
        unused = _unused_parameters(*trace(False))
        if not unused:
            raise SftError("a parameter receives no gradient from the loss (one the loss reads "
                           "only through an op without a derivative?); freeze it with "
                           "requires_grad_(False)", name) from None
        with _without_gradient(model, unused):
            gm, sig = trace(True)
    canonical = canonical_names(model)
    strip = lambda n: canonical.get(n[len("model."):] if n.startswith("model.") else n, n)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = [n.name for n in output.args[0]]
    grads = {}
    for out, param in sig.backward_signature.gradients_to_parameters.items():
        grads.setdefault(strip(param), []).append(out)
    return _Joint(gm, [strip(n) for n in sig.parameters], [strip(n) for n in sig.buffers], outputs,
                  sig.user_outputs[0], list(sig.user_outputs[1:]), grads,
                  {strip(b): o for o, b in sig.buffers_to_mutate.items()})


def canonical_names(model) -> dict:
    """Every name of a parameter or buffer (tied ones under each of theirs) -> the name
    `named_parameters()` / `named_buffers()` give it."""
    names = {}
    for every, first in ((model.named_parameters(remove_duplicate=False), model.named_parameters()),
                         (model.named_buffers(remove_duplicate=False), model.named_buffers())):
        by_id = {id(t): n for n, t in first}
        names.update({n: by_id[id(t)] for n, t in every})
    return names


def _unused_parameters(gm, sig) -> set:
    """The model's parameter names whose placeholders in a forward graph nothing reads."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {p[len("model."):] for p, node in zip(sig.parameters, placeholders) if not node.users}
