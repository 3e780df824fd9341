"""`sft.compile_train_step`: a PyTorch training step (forward, loss, backward, the optimizer's
update) compiled as one program whose parameters and optimizer state live on the device.

    step = sft.compile_train_step(model, loss_fn, optimizer, (x, y))
    for x, y in data:
        loss = step(x, y)          # one step; the loss as a 0-d tensor
    step.sync()                    # the trained parameters into `model` (and the optimizer's state)

Each call passes the state on the device to the program and keeps the updated state there (no
copy through the host); `state_dict()` and `sync()` read it back.
"""

from __future__ import annotations

import time

from .api import compile_prepared
from .compiled import CompiledModel
from .importers.torch_train import TrainGraph, trace_train_step
from .plan import Plan
from .program import program_from


class TrainStep:
    """A compiled training step. `step(*inputs, target)` runs one step (the batch's shapes and
    dtypes are those of the example batch) and returns the loss. The model's parameters and
    buffers and the optimizer's state (`exp_avg.<param>`, `exp_avg_sq.<param>`,
    `momentum_buffer.<param>`, `step`) stay on the device between calls."""

    def __init__(self, compiled: CompiledModel, graph: TrainGraph, model, optimizer):
        self.compiled = compiled
        self._graph = graph
        self._model, self._optimizer = model, optimizer

    def __call__(self, *batch):
        """One training step on `batch = (*inputs, target)`; returns the loss (0-d, of the kind
        the batch is: torch, numpy)."""
        return self.compiled(*batch)

    # The compiled program as sft.compile gives it: plan, search report, dispatches, stages.
    plan = property(lambda self: self.compiled.plan)
    search = property(lambda self: self.compiled.search)
    stages = property(lambda self: self.compiled.stages)
    dispatch_count = property(lambda self: self.compiled.dispatch_count)
    seconds = property(lambda self: self.compiled.seconds)

    @property
    def steps(self) -> int:
        """Steps taken so far (the optimizer's count, including steps before compiling)."""
        return int(self.compiled.state_dict()["step"])

    def state_dict(self) -> dict:
        """The model's state as it is on the device now: trained parameters, frozen ones and
        buffers, as torch tensors by the model's names (what `model.state_dict()` holds)."""
        every = self.compiled.state_dict()
        return {n: every[n] for n in (*self._graph.parameters, *self._graph.buffers)}

    def optimizer_state(self) -> dict:
        """The optimizer's state on the device: `<slot>.<param>` tensors and `step`."""
        every = self.compiled.state_dict()
        model = {*self._graph.parameters, *self._graph.buffers}
        return {n: v for n, v in every.items() if n not in model}

    def sync(self) -> None:
        """Copy the state on the device into the user's model (parameters and buffers, in
        place) and optimizer (its per-parameter state), so that eager PyTorch can carry on
        from here. The compiled step keeps its own copy."""
        import torch

        every = self.compiled.state_dict()
        named = {**dict(self._model.named_parameters()), **dict(self._model.named_buffers())}
        with torch.no_grad():
            for name in (*self._graph.parameters, *self._graph.buffers):
                named[name].copy_(every[name])
        steps = float(every["step"])
        if steps == 0:
            return  # torch keeps no state for a parameter that has not been stepped
        for name in self._graph.parameters:
            st = self._optimizer.state[named[name]]
            for slot in self._graph.update.slots():
                st[slot] = every[f"{slot}.{name}"].clone()
            if self._graph.update.kind == "adam":
                st["step"] = torch.tensor(steps, dtype=torch.float32)

    def load_state_dict(self, state_dict) -> None:
        """New values for any of the step's state (model names, or optimizer state names)."""
        self.compiled.load_state_dict(state_dict)


def compile_train_step(model, loss_fn, optimizer, example_batch, target: str = "host",
                       plan: Plan | None = None, search: str = "none",
                       keep_ir: bool = False) -> TrainStep:
    """Compile one training step of a torch.nn.Module: `loss_fn(model(*inputs), target)`, its
    gradient, and `optimizer`'s update (torch.optim.SGD with momentum, dampening, weight decay,
    nesterov; Adam; AdamW; one parameter group, or several with the same settings), at the
    shapes of `example_batch = (*inputs, target)`.

    The model is traced in the mode it is in (call `model.train()` first for batch norm's batch
    statistics; its running statistics are then state the step updates). Train-mode dropout is
    refused: a compiled step cannot draw random numbers. Hyper-parameters are read from the
    optimizer's `param_groups` and compiled in; training resumes from the optimizer's state if
    it has taken steps. Neither the model nor the optimizer changes until `sync()`.

    `plan` and `search` ("none", "model", "verify") are those of `sft.compile`; `plan=Plan()`
    is IREE's own compile of the step.
    """
    start = time.perf_counter()
    graph = trace_train_step(model, loss_fn, optimizer, example_batch)
    name = f"{type(model).__name__}.train_step"
    program, module = program_from(graph.linalg, name, graph.signature, graph.state,
                                   import_seconds=time.perf_counter() - start)
    compiled = compile_prepared(program, module, target, plan, search, keep_ir)
    return TrainStep(compiled, graph, model, optimizer)
