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
tensor the step changes. Hyper-parameters are read from the optimizer and become constants of
the program (a new learning rate needs a new compile)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ..errors import SftError
from ..values import Result, Signature, spec_of
from .torch import import_error, stateless_import

# Ops that draw random numbers: a compiled step would replay one fixed draw, or none.
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "multinomial", "uniform", "exponential")
# Hyper-parameters that do not change the arithmetic (how torch schedules it on a device).
_IGNORED = {"params", "foreach", "fused", "capturable", "differentiable", "initial_lr", "name"}


@dataclass(frozen=True)
class Update:
    """The optimizer's rule and its hyper-parameters, read from `param_groups`."""

    kind: str    # "sgd" | "adam"
    hyper: dict  # lr, momentum, ... as Python floats and bools

    def slots(self) -> tuple[str, ...]:
        """The per-parameter state tensors the rule keeps, as they are named in torch."""
        if self.kind == "adam":
            return ("exp_avg", "exp_avg_sq")
        return ("momentum_buffer",) if self.hyper["momentum"] != 0 else ()


def read_optimizer(optimizer, what: str = "optimizer") -> Update:
    """The update rule of a torch.optim.SGD, Adam or AdamW; anything else is refused."""
    import torch

    if isinstance(optimizer, torch.optim.Adam):  # AdamW is an Adam with decoupled decay
        kind = "adam"
    elif isinstance(optimizer, torch.optim.SGD):
        kind = "sgd"
    else:
        raise SftError(f"{what}: {type(optimizer).__name__} is not supported "
                       "(torch.optim.SGD, Adam and AdamW are)")
    groups = [{k: _plain(v) for k, v in g.items() if k not in _IGNORED} for g in optimizer.param_groups]
    if not groups:
        raise SftError(f"{what}: the optimizer has no parameter groups")
    if any(g != groups[0] for g in groups[1:]):
        raise SftError(f"{what}: {len(groups)} parameter groups with different settings are not "
                       "supported; use one group")
    hyper = groups[0]
    if hyper.get("maximize"):
        raise SftError(f"{what}: maximize=True is not supported")
    if hyper.get("amsgrad"):
        raise SftError(f"{what}: amsgrad=True is not supported")
    if kind == "sgd" and hyper["nesterov"] and (hyper["momentum"] <= 0 or hyper["dampening"] != 0):
        raise SftError(f"{what}: nesterov needs a momentum and zero dampening")
    return Update(kind, hyper)


def _plain(value):
    """A hyper-parameter as a Python value (a tensor lr or betas as floats), to compare and to
    compile in."""
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _sgd(h: dict, param, grad, slots: dict, step):
    """torch.optim.SGD's update of one parameter; returns (parameter, slots)."""
    import torch

    if h["weight_decay"] != 0:
        grad = grad + h["weight_decay"] * param
    if h["momentum"] != 0:
        buf = slots["momentum_buffer"]
        # torch starts the buffer as the first gradient itself (no dampening on step one)
        buf = torch.where(step == 0, grad, buf * h["momentum"] + (1 - h["dampening"]) * grad)
        grad = grad + h["momentum"] * buf if h["nesterov"] else buf
        slots = {"momentum_buffer": buf}
    return param - h["lr"] * grad, slots


def _adam(h: dict, param, grad, slots: dict, step):
    """torch.optim.Adam's update (AdamW's with decoupled_weight_decay) of one parameter; `step`
    is the step counter after this step."""
    import torch

    lr, (beta1, beta2), eps, wd = h["lr"], h["betas"], h["eps"], h["weight_decay"]
    if wd != 0:
        if h.get("decoupled_weight_decay"):
            param = param * (1 - lr * wd)
        else:
            grad = grad + wd * param
    exp_avg, exp_avg_sq = slots["exp_avg"], slots["exp_avg_sq"]
    exp_avg = exp_avg + (1 - beta1) * (grad - exp_avg)  # lerp, as torch computes a weight < 0.5
    exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    # torch computes the bias corrections in double on the host; here in f64 in the program
    t = step.to(torch.float64)
    bias_correction1 = 1 - torch.pow(torch.tensor(beta1, dtype=torch.float64), t)
    bias_correction2 = 1 - torch.pow(torch.tensor(beta2, dtype=torch.float64), t)
    step_size = (lr / bias_correction1).to(param.dtype)
    bc2_sqrt = torch.sqrt(bias_correction2).to(param.dtype)
    denom = exp_avg_sq.sqrt() / bc2_sqrt + eps
    return param - step_size * (exp_avg / denom), {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}


@dataclass
class TrainGraph:
    """What tracing a step gives: the linalg text, the signature (state: parameters, buffers,
    optimizer state; inputs: the batch; results: the loss, then the updated state) and the
    state's initial values (torch tensors by name, in argument order)."""

    linalg: str
    signature: Signature
    state: dict
    parameters: tuple[str, ...]  # the trained parameters' names (model-style)
    buffers: tuple[str, ...]     # the model's buffers (and frozen parameters) the step reads
    update: Update


def _refuse_dropout(model, name: str) -> None:
    import torch

    for path, m in model.named_modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0:
            raise SftError(f"'{path}' is {type(m).__name__}(p={m.p}) in train mode: random ops are "
                           "not supported in a compiled step; set p=0 or call .eval() on it", name)


def _initial_slots(optimizer, update: Update, named: dict) -> tuple[dict, float]:
    """The optimizer's state where it has taken steps already (so compiling mid-training
    continues it), else zeros; and the step count."""
    import torch

    slots, steps = {}, set()
    for pname, p in named.items():
        st = optimizer.state.get(p, {})
        for slot in update.slots():
            value = st.get(slot)
            slots[f"{slot}.{pname}"] = (torch.zeros_like(p) if value is None else value).detach().clone()
        if "step" in st:
            steps.add(float(st["step"]))
        elif st.get("momentum_buffer") is not None:
            steps.add(1.0)  # SGD counts no steps; a buffer means it has taken one
        else:
            steps.add(0.0)
    if len(steps) > 1:
        raise SftError("the optimizer's parameters have taken different numbers of steps")
    return slots, steps.pop() if steps else 0.0


def trace_train_step(model, loss_fn, optimizer, example_batch,
                     func_name: str = "main") -> TrainGraph:
    """Trace one training step of `model` (in the mode it is in) with `loss_fn(model(*inputs),
    target)` and `optimizer`'s rule, at `example_batch = (*inputs, target)`'s shapes, and lower
    it to linalg-on-tensors. The user's model and optimizer are not changed."""
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
    update = read_optimizer(optimizer)
    _refuse_dropout(model, name)
    params = dict(model.named_parameters())
    ids = {id(p) for p in params.values()}
    opt_params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(id(p) not in ids for p in opt_params):
        raise SftError("the optimizer holds tensors that are not parameters of the model", name)
    try:
        with warnings.catch_warnings(), sdpa_kernel(SDPBackend.MATH):
            warnings.simplefilter("ignore")
            joint = _joint(model, loss_fn, batch, fx.get_decomposition_table(), name)
            # torch.optim steps the parameters that it holds and that get a gradient; the others
            # (frozen, or unused by the loss) and the buffers are read, never updated, except
            # the buffers the forward updates (batch norm's running statistics).
            held = {id(p) for p in opt_params}
            trained = {n: p for n, p in params.items() if id(p) in held and n in joint.grads}
            if not trained:
                raise SftError("the optimizer trains none of the model's parameters", name)
            fixed = {**{n: p for n, p in params.items() if n not in trained},
                     **dict(model.named_buffers())}
            slots, steps = _initial_slots(optimizer, update, trained)
            state = {**{n: v.detach().clone() for n, v in [*trained.items(), *fixed.items()]},
                     **slots, "step": torch.tensor(steps, dtype=torch.float32)}
            if len(state) != len(trained) + len(fixed) + len(slots) + 1:
                raise SftError("a model parameter or buffer is named like the optimizer's state "
                               "('step', 'exp_avg.*', ...)", name)
            mutated = [b for b in fixed if b in joint.mutated]
            results = [*trained, *mutated, *slots, "step"]
            gm = make_fx(_step_function(joint, update, list(state), list(trained)),
                         decomposition_table=fx.get_decomposition_table())(*state.values(), *batch)
            _refuse_random(gm, name)
            text = stateless_import(gm.graph, gm, func_name)
    except SftError:
        raise
    except Exception as exc:  # aot_autograd, make_fx or torch-mlir failed: name the op where we can
        raise import_error(exc, name, "trace the training step") from None
    signature = Signature(tuple(spec_of(x) for x in batch),
                          (Result("output"), *[Result("state", n) for n in results]),
                          None, tuple((n, *spec_of(v)) for n, v in state.items()))
    return TrainGraph(text, signature, state, tuple(trained), tuple(fixed), update)


def _step_function(joint, update: Update, state_names: list[str], trained: list[str]):
    """The step as a function of (*state, *batch) -> (loss, *trained parameters, *updated
    buffers, *optimizer slots, step), in that order: the joint graph, then the update."""
    rule = _adam if update.kind == "adam" else _sgd
    mutated = [b for b in state_names if b in joint.mutated]
    slots = [f"{slot}.{k}" for k in trained for slot in update.slots()]

    def step_fn(*args):
        values = dict(zip(state_names, args))
        outs = joint.gm(*[values[k] for k in joint.parameters], *[values[k] for k in joint.buffers],
                        *args[len(state_names):])
        by_name = dict(zip(joint.outputs, outs))
        step = values["step"]
        counted = step + 1  # Adam's bias correction uses the count after this step
        new = {}
        for k in trained:
            mine = {slot: values[f"{slot}.{k}"] for slot in update.slots()}
            new[k], mine = rule(update.hyper, values[k], by_name[joint.grads[k]], mine,
                                counted if update.kind == "adam" else step)
            new.update({f"{slot}.{k}": v for slot, v in mine.items()})
        return (by_name[joint.loss], *[new[k] for k in trained],
                *[by_name[joint.mutated[b]] for b in mutated], *[new[k] for k in slots], counted)

    return step_fn


def _refuse_random(gm, name: str) -> None:
    for node in gm.graph.nodes:
        if node.op == "call_function" and any(r in str(node.target) for r in _RANDOM):
            raise SftError(f"the training step draws random numbers ({node.target}): not "
                           "supported in a compiled step", name)


@dataclass
class _Joint:
    """aot_autograd's joint graph of the model and its loss: `gm(*parameters, *buffers, *batch)`
    returns the outputs named `outputs`: buffer updates, the loss, the gradients."""

    gm: object
    parameters: list[str]
    buffers: list[str]
    outputs: list[str]
    loss: str
    grads: dict      # parameter name -> output name
    mutated: dict    # buffer name -> output name


def _joint(model, loss_fn, batch, decompositions, name: str) -> _Joint:
    import torch
    from torch._functorch.aot_autograd import aot_export_module

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self._loss = (loss_fn,)  # a tuple: not registered as a child module

        def forward(self, *args):
            loss = self._loss[0](self.model(*args[:-1]), args[-1])
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise SftError(f"loss_fn must return a 0-d tensor, got "
                               f"{getattr(loss, 'shape', type(loss).__name__)}", name)
            return (loss,)

    gm, sig = aot_export_module(WithLoss(), batch, trace_joint=True, output_loss_index=0,
                                decompositions=decompositions)
    strip = lambda n: n[len("model."):] if n.startswith("model.") else n
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = [n.name for n in output.args[0]]
    return _Joint(gm, [strip(n) for n in sig.parameters], [strip(n) for n in sig.buffers], outputs,
                  sig.user_outputs[0],
                  {strip(p): o for o, p in sig.backward_signature.gradients_to_parameters.items()},
                  {strip(b): o for o, b in sig.buffers_to_mutate.items()})
