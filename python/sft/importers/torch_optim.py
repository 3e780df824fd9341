"""torch.optim's update rules written out for a compiled training step, and what the step reads
of the optimizer at each call.

The hyper-parameters (lr, momentum, dampening, betas, eps, weight decay; one set per parameter
group) are inputs of the compiled program, read from `param_groups` at every call, so that a
learning-rate scheduler, or a hand edit of `param_groups`, acts on the compiled step as it does
on `optimizer.step()`. What changes the form of the update (momentum on or off, nesterov,
maximize, decoupled weight decay) is compiled in, and a call after it changed is refused.

Only torch.optim.SGD, Adam and AdamW are written out, as torch computes them on the CPU (the
single-tensor, non-capturable path). An optimizer sft cannot prove to be one of them (a subclass
with methods of its own, an option torch's class does not have, step hooks) is refused: its
`step()` is never called, so compiling torch's rule in its place would train something else."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from ..errors import SftError

# The options of each rule, and the hyper-parameters among them that are inputs of the step.
_OPTIONS = {"sgd": {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                    "fused", "differentiable"},
            "adam": {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize",
                     "decoupled_weight_decay", "fused", "differentiable"}}
# Adam's bias corrections are computed as torch computes them, in Python floats on the host
# (from the step count after this step), and passed in: no f64 pow on the device (SPIR-V has none).
HYPER = {"sgd": ("lr", "momentum", "dampening", "weight_decay"),
         "adam": ("lr", "beta1", "eps", "weight_decay", "step_size", "bias_correction2_sqrt", "beta2")}
# Keys that do not change the arithmetic: how torch schedules it on a device, and what learning
# rate schedulers keep in a group (they change lr, momentum and betas, which are read anyway).
_INERT = {"params", "foreach", "capturable", "name", "initial_lr",
          "max_lr", "min_lr", "base_lr", "base_momentum", "max_momentum", "swa_lr"}
# What a subclass may define without changing the update.
_HARMLESS = {"__init__", "__setstate__", "__module__", "__qualname__", "__doc__", "__dict__",
             "__weakref__", "__annotations__", "__firstlineno__", "__static_attributes__",
             "__orig_bases__", "__parameters__"}


@dataclass(frozen=True)
class Group:
    """One parameter group as compiled: the form of its update (option -> value) and the
    names of the trained parameters it holds."""

    form: tuple[tuple[str, object], ...]
    params: tuple[str, ...]
    ids: tuple[int, ...] = ()  # id() of every tensor the group holds, to see one move
    def option(self, key: str):
        return dict(self.form)[key]


@dataclass(frozen=True)
class Update:
    """The optimizer's rule (`kind`: "sgd" or "adam") and its parameter groups."""

    kind: str
    groups: tuple[Group, ...]

    def slots(self, group: Group | None = None) -> tuple[str, ...]:
        """The per-parameter state tensors the rule keeps (of `group`, else of any group), as
        torch names them."""
        if self.kind == "adam":
            return ("exp_avg", "exp_avg_sq")
        groups = self.groups if group is None else (group,)
        return ("momentum_buffer",) if any(g.option("momentum_on") for g in groups) else ()

    def hyper_inputs(self, optimizer, step: float, what: str = "optimizer") -> list[np.ndarray]:
        """The hyper-parameters as `optimizer.param_groups` holds them now (0-d float64 arrays),
        for the step that makes the count `step`; an SftError where the groups no longer have
        the form the step was compiled with, or hold other tensors."""
        if len(optimizer.param_groups) != len(self.groups):
            raise SftError(f"{what}: {len(optimizer.param_groups)} parameter groups, the step was "
                           f"compiled with {len(self.groups)}; compile the step again")
        out = []
        for i, (group, g) in enumerate(zip(self.groups, optimizer.param_groups)):
            form = _form(self.kind, g, f"{what}.param_groups[{i}]")
            if tuple(map(id, g["params"])) != group.ids:
                raise SftError(f"{what}.param_groups[{i}] holds other tensors than when the step "
                               "was compiled; compile the step again")
            if form != group.form:
                changed = [k for (k, v), (_, w) in zip(form, group.form) if v != w]
                raise SftError(f"{what}.param_groups[{i}]: {', '.join(changed)} changed since the "
                               "step was compiled, which changes the form of the update; compile "
                               "the step again")
            values = _hyper(self.kind, g, group, f"{what}.param_groups[{i}]", step)
            out.extend(np.array(v, dtype=np.float64) for v in values)
        return out


def optimizer_kind(optimizer, what: str = "optimizer") -> str:
    """"sgd" or "adam" for a torch.optim.SGD, Adam or AdamW whose update sft can prove it
    compiles; anything else is refused with one line."""
    import torch
    from torch.optim import optimizer as torch_optimizer

    bases = (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD)
    base = next((b for b in bases if isinstance(optimizer, b)), None)
    name = type(optimizer).__name__
    if base is None:
        raise SftError(f"{what}: {name} is not supported (torch.optim.SGD, Adam and AdamW are)")
    for cls in type(optimizer).__mro__:
        if cls in bases:
            break
        # torch wraps `step` onto a subclass itself (profiling hooks): that one is the base's
        own = sorted(k for k, v in vars(cls).items() if k not in _HARMLESS
                     and not (k == "step" and inspect.unwrap(v) is inspect.unwrap(base.step)))
        if own:
            raise SftError(f"{what}: {name} subclasses torch.optim.{base.__name__} and defines "
                           f"{', '.join(own[:3])}: sft compiles torch's own update and cannot "
                           f"tell what {name}'s does; use torch.optim.{base.__name__} itself")
    patched = vars(optimizer).get("step")
    if patched is not None and not getattr(patched, "_wrapped_by_lr_sched", False):
        raise SftError(f"{what}: this {name}'s step() was replaced: sft compiles torch's own update")
    if optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks or \
            torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks:
        raise SftError(f"{what}: step hooks are registered; a compiled step never calls step(), "
                       "so they would not run")
    return "adam" if isinstance(optimizer, torch.optim.Adam) else "sgd"


def read_update(optimizer, trained: dict[int, str], what: str = "optimizer") -> Update:
    """The update `optimizer` applies, its groups holding the parameters of `trained` (id ->
    name) they hold; refused where sft cannot compile it."""
    kind = optimizer_kind(optimizer, what)
    if not optimizer.param_groups:
        raise SftError(f"{what}: the optimizer has no parameter groups")
    groups = []
    for i, g in enumerate(optimizer.param_groups):
        group = Group(_form(kind, g, f"{what}.param_groups[{i}]"),
                      tuple(trained[id(p)] for p in g["params"] if id(p) in trained),
                      tuple(map(id, g["params"])))
        _hyper(kind, g, group, f"{what}.param_groups[{i}]", 1.0)  # checks the values now
        groups.append(group)
    return Update(kind, tuple(groups))


def _form(kind: str, g: dict, where: str) -> tuple[tuple[str, object], ...]:
    """What of a group is compiled in: the options that change the update's form."""
    unknown = sorted(set(g) - _OPTIONS[kind] - _INERT)
    if unknown:
        raise SftError(f"{where}: option {unknown[0]!r} is not one of torch.optim's for this "
                       "optimizer; sft cannot tell what it does")
    for option in ("amsgrad", "fused", "differentiable"):  # other arithmetic than written here
        if g.get(option):
            raise SftError(f"{where}: {option}=True is not supported")
    form = {"maximize": bool(g.get("maximize", False))}
    if kind == "sgd":
        form.update(momentum_on=float(g["momentum"]) != 0, nesterov=bool(g["nesterov"]))
    else:
        form.update(decoupled_weight_decay=bool(g.get("decoupled_weight_decay", False)))
    return tuple(sorted(form.items()))


def _hyper(kind: str, g: dict, group: Group, where: str, step: float) -> tuple[float, ...]:
    """The group's hyper-parameters as floats, in HYPER's order (a tensor lr read as its value);
    Adam's bias corrections for the count `step`, in Python floats as torch computes them."""
    if kind == "sgd":
        values = tuple(float(g[k]) for k in HYPER["sgd"])
        if group.option("nesterov") and (values[1] <= 0 or values[2] != 0):
            raise SftError(f"{where}: nesterov needs a momentum and zero dampening")
        return values
    lr, (beta1, beta2) = float(g["lr"]), (float(b) for b in g["betas"])
    step_size = lr / (1 - beta1 ** step)
    return lr, beta1, float(g["eps"]), float(g["weight_decay"]), step_size, \
        (1 - beta2 ** step) ** 0.5, beta2


def apply_update(update: Update, group: Group, h: dict, param, grad, slots: dict, step):
    """One parameter's update under `group`'s rule; `h` holds the hyper-parameters as 0-d
    float64 tensors (program inputs), `step` the steps taken before this one. Returns
    (new parameter, new slots)."""
    if group.option("maximize"):
        grad = -grad
    rule = _adam if update.kind == "adam" else _sgd
    return rule(group, h, param, grad, slots, step)


def _sgd(group: Group, h: dict, param, grad, slots: dict, step):
    """torch.optim.SGD's update of one parameter."""
    import torch

    grad = grad + h["weight_decay"] * param  # exact where the decay is 0
    if group.option("momentum_on"):
        buf = slots["momentum_buffer"]
        # torch starts the buffer as the first gradient itself (no dampening on step one)
        buf = torch.where(step == 0, grad, buf * h["momentum"] + (1 - h["dampening"]) * grad)
        grad = grad + h["momentum"] * buf if group.option("nesterov") else buf
        slots = {"momentum_buffer": buf}
    return param - h["lr"] * grad, slots


def _adam(group: Group, h: dict, param, grad, slots: dict, step):
    """torch.optim.Adam's update (AdamW's with decoupled weight decay) of one parameter."""
    import torch

    lr, beta1, eps, wd, step_size, bc2_sqrt, beta2 = (h[k] for k in HYPER["adam"])
    if group.option("decoupled_weight_decay"):
        param = param * (1 - lr * wd)
    else:
        grad = grad + wd * param
    exp_avg, exp_avg_sq = slots["exp_avg"], slots["exp_avg_sq"]
    exp_avg = torch.lerp(exp_avg, grad, (1 - beta1).to(grad.dtype))  # both of torch's branches
    exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    denom = exp_avg_sq.sqrt() / bc2_sqrt + eps
    # addcdiv(exp_avg, denom, value=-step_size): the value multiplies before the division
    return param + (-step_size * exp_avg) / denom, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
