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

import dataclasses
import time

from .api import compile_prepared
from .compiled import CompiledModel
from .errors import SftError
from .importers.torch_train import TrainGraph, canonical_names, optimizer_state, trace_train_step
from .plan import Plan
from .program import program_from
from .targets import Target, get_target


class TrainStep:
    """A compiled training step. `step(*inputs, target)` runs one step (the batch's shapes and
    dtypes are those of the example batch) and returns the loss. The model's parameters and
    buffers and the optimizer's state (`exp_avg.<param>`, `exp_avg_sq.<param>`,
    `momentum_buffer.<param>`, `step`) stay on the device between calls.

    The model and the optimizer stay the truth the step starts from: each call reads the
    hyper-parameters from `optimizer.param_groups` (a scheduler's lr acts at once), and a
    tensor of the model or of the optimizer's state changed outside the step since it was
    compiled or last synced (an eager step, `load_state_dict`, an in-place edit under
    `torch.no_grad()`; found by torch's version counters, so not an edit through `.data`) is
    uploaded before the step."""

    def __init__(self, compiled: CompiledModel, graph: TrainGraph, model, optimizer,
                 settings: dict | None = None):
        self.compiled = compiled
        self._settings = settings or {}  # what compile_train_step was given, for `save`
        self._graph = graph
        self._model, self._optimizer = model, optimizer
        # where each tensor of the model the step mirrors is held: (its module's dict, key)
        self._homes = {n: _home(model, n) for n in (*graph.parameters, *graph.buffers)}
        self._params = {n: self._homes[n][0][self._homes[n][1]] for n in graph.parameters}
        self._seen = self._versions()
        self._canonical = canonical_names(model)
        self._count = float(graph.state["step"])  # the step count, mirrored on the host
        # walked once: the modules and parameters whose mode and requires_grad are compiled in
        self._modules, self._all_params = tuple(model.modules()), tuple(model.parameters())
        self._traced = _traced_as(self._modules, self._all_params)

    def __call__(self, *batch):
        """One training step on `batch = (*inputs, target)`; returns the loss (0-d, of the kind
        the batch is: torch, numpy)."""
        if len(batch) != self._graph.batch_size:
            raise SftError(f"expected a batch of {self._graph.batch_size} tensors (*inputs, "
                           f"target), got {len(batch)}")
        shapes = [tuple(getattr(x, "shape", ())) for x in batch]
        compiled_for = [shape for shape, _ in self._settings.get("batch", [])]
        if compiled_for and shapes != [tuple(s) for s in compiled_for]:
            raise SftError(f"the batch's shapes {shapes} are not those the step was compiled for "
                           f"{[tuple(s) for s in compiled_for]}: compile a step for the last, "
                           "smaller batch (after step.sync() it starts from where this one is) "
                           "or drop it (DataLoader(drop_last=True))")
        if _traced_as(self._modules, self._all_params) != self._traced:
            raise SftError("the model's train/eval mode or which parameters require grad changed "
                           "since the step was compiled (both are compiled in); compile the step again")
        self._upload_changes()
        hyper = self._graph.update.hyper_inputs(self._optimizer, self._count + 1)
        # the dropout seed, from torch's generator (torch.manual_seed repeats a run)
        seed = (_draw_seed(),) if self._graph.seeded else ()
        loss = self.compiled(*batch, *hyper, *seed)
        self._count += 1
        self._optimizer._opt_called = True  # as optimizer.step() marks it for lr schedulers
        return loss

    # The compiled program as sft.compile gives it: plan, search report, dispatches, stages.
    plan = property(lambda self: self.compiled.plan)
    search = property(lambda self: self.compiled.search)
    stages = property(lambda self: self.compiled.stages)
    dispatch_count = property(lambda self: self.compiled.dispatch_count)
    seconds = property(lambda self: self.compiled.seconds)

    def rank_times(self) -> list[dict]:
        """A data-parallel step's (`distributed=True`) median step time of every rank, split
        into compute and communication, stragglers flagged (`DataParallelProgram.rank_times`;
        a collective: every rank calls it)."""
        if not hasattr(self.compiled, "rank_times"):
            raise SftError("rank_times() is for a step compiled with distributed=True")
        return self.compiled.rank_times()

    @property
    def steps(self) -> int:
        """Steps taken so far (the optimizer's count, including steps before compiling)."""
        self._upload_changes()
        return int(self._count)

    def state_dict(self) -> dict:
        """The model's state as it is on the device now: trained parameters, frozen ones and
        buffers, as torch tensors by the model's names (what `model.state_dict()` holds)."""
        self._upload_changes()
        every = self.compiled.state_dict()
        # by every name model.state_dict() has: a tied parameter under each of its names
        return {n: every[self._canonical.get(n, n)] for n in self._model.state_dict()
                if self._canonical.get(n, n) in every}

    def optimizer_state(self) -> dict:
        """The optimizer's state on the device: `<slot>.<param>` tensors and `step`."""
        self._upload_changes()
        every = self.compiled.state_dict()
        model = {*self._graph.parameters, *self._graph.buffers}
        return {n: v for n, v in every.items() if n not in model}

    def sync(self) -> None:
        """Copy the state on the device into the user's model (parameters and buffers, in
        place) and optimizer (its per-parameter state), so that eager PyTorch can carry on
        from here; the compiled step picks up whatever eager changes after that."""
        import torch

        self._upload_changes()  # what changed in the model since is kept, not overwritten
        every = self.compiled.state_dict()
        named = {n: d[key] for n, (d, key) in self._homes.items()}
        with torch.no_grad():
            for name in (*self._graph.parameters, *self._graph.buffers):
                named[name].copy_(every[name])
        steps = float(every["step"])
        update = self._graph.update
        if steps > 0:  # torch keeps no state for a parameter that has not been stepped
            for group in update.groups:
                for name in group.params:
                    st = self._optimizer.state[named[name]]
                    for slot in update.slots(group):
                        st[slot] = every[f"{slot}.{name}"].clone()
                    if update.kind == "adam":
                        st["step"] = torch.tensor(steps, dtype=torch.float32)
        self._seen = self._versions()

    def save(self, path) -> None:
        """Write a checkpoint that `sft.load_train_step(path, model, optimizer, loss_fn)` resumes
        from: the state as torch's own `model.state_dict()` and `optimizer.state_dict()` (after
        `sync()`, which this calls; `torch.load(path)["model"]` reads it without sft), the plan
        (a load compiles with it: no search), and the step's settings and batch shapes."""
        import torch

        self.sync()
        torch.save({"format": CHECKPOINT_FORMAT, "model": self._model.state_dict(),
                    "optimizer": self._optimizer.state_dict(), "plan": self.plan.to_json(),
                    "settings": self._settings}, path)

    def load_state_dict(self, state_dict) -> None:
        """New values for any of the step's state (model names, a tied parameter under any of
        its names, or optimizer state names)."""
        self.compiled.load_state_dict({self._canonical.get(k, k): v for k, v in state_dict.items()})
        if "step" in state_dict:
            self._count = float(state_dict["step"])

    def _versions(self) -> dict:
        """(id, version) of each tensor of the model and the optimizer that the step's state
        mirrors (None: no such optimizer state)."""
        named = {n: d.get(key) for n, (d, key) in self._homes.items()}
        seen = {n: (id(t), getattr(t, "_version", None)) for n, t in named.items()}
        for n, p in self._params.items():
            if named[n] is not p:
                raise SftError(f"the model's parameter '{n}' was replaced by another tensor since "
                               "the step was compiled (the optimizer still holds the old one); "
                               "compile the step again")
            st = self._optimizer.state.get(p) or {}
            for slot in (*self._graph.update.slots(), "step"):
                t = st.get(slot)
                seen[(slot, n)] = None if t is None else (id(t), getattr(t, "_version", t))
        return seen

    def _upload_changes(self) -> None:
        """Upload what changed in the model or the optimizer outside the step since it last
        looked (nothing, most calls: one pass over the version counters)."""
        import torch

        now = self._versions()
        if now == self._seen:
            return
        changed = [k for k, v in now.items() if self._seen.get(k) != v]
        upload = {}
        for k in changed:
            if isinstance(k, str):
                d, key = self._homes[k]
                if d.get(key) is None:
                    raise SftError(f"the model's tensor '{k}' was removed since the step was compiled")
                upload[k] = d[key].detach()
        if any(isinstance(k, tuple) for k in changed):  # the optimizer's state
            slots, steps = optimizer_state(self._optimizer, self._graph.update, self._params)
            upload.update({k: v for k, v in slots.items()
                           if (k.split(".", 1)[0], k.split(".", 1)[1]) in changed})
            if self._graph.update.kind == "sgd" and steps > 0:
                steps = max(steps, self._count)  # SGD keeps no count: 1 means "has a buffer"
            upload["step"] = torch.tensor(steps, dtype=torch.float32)
            self._count = steps
        self.compiled.load_state_dict(upload)
        self._seen = now


def _draw_seed():
    """A dropout seed from torch's generator (an int64 0-d tensor)."""
    import torch

    return torch.randint(0, 1 << 31, (), dtype=torch.int64)


def _traced_as(modules, params) -> tuple:
    """What of the model a compiled step has compiled in beyond its tensors: every module's
    mode and every parameter's requires_grad."""
    return tuple(m.training for m in modules), tuple(p.requires_grad for p in params)


def _home(model, name: str) -> tuple[dict, str]:
    """The dict of the module that holds the model's parameter or buffer `name`, and its key
    there: looking a tensor up there costs far less than walking the model each call."""
    prefix, _, key = name.rpartition(".")
    module = model.get_submodule(prefix)
    return (module._parameters if key in module._parameters else module._buffers), key


def compile_train_step(model, loss_fn, optimizer, example_batch, target: Target | str = "host",
                       plan: Plan | None = None, search: str = "none",
                       keep_ir: bool = False, max_grad_norm: float | None = None,
                       accumulation_steps: int = 1, distributed: bool = False,
                       bucket_cap_mb: float | None = None, process_group=None) -> TrainStep:
    """Compile one training step of a torch.nn.Module: `loss_fn(model(*inputs), target)`, its
    gradient, and `optimizer`'s update (torch.optim.SGD with momentum, dampening, weight decay,
    nesterov, maximize; Adam; AdamW; any number of parameter groups, each with its own
    settings), at the shapes of `example_batch = (*inputs, target)`.

    The model is traced in the mode it is in (call `model.train()` first for batch norm's batch
    statistics; its running statistics are then state the step updates). Train-mode
    `nn.Dropout` masks through a counter-based generator (`importers/dropout.py`) seeded from
    torch's generator at each call: repeatable under `torch.manual_seed`, the same keep rate as
    eager's, not eager's masks; other dropout kinds in train mode are refused. Hyper-parameters are inputs of the
    step, read from the optimizer's `param_groups` at every call (schedulers work); what
    changes the form of the update (momentum on or off, nesterov, maximize) is compiled in, and
    a call after it changed is refused. An optimizer sft cannot prove it compiles (a subclass
    with its own methods, unknown options, step hooks) is refused. Training resumes from the
    optimizer's state if it has taken steps. The step does not write to the model or the
    optimizer until `sync()`; changes made to them are uploaded before the next call.

    `max_grad_norm` clips the gradients to that global 2-norm inside the step, as
    `torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)` before
    `optimizer.step()` does. `accumulation_steps=k` runs each batch as k micro-batches (every
    tensor of it split along dim 0 as `torch.chunk(k)` splits it) and sums their gradients
    before the one update, as `(loss_fn(model(x), y) / k).backward()` over the chunks, then
    `optimizer.step()`, does; batch norm's running statistics advance once per micro-batch, and
    the step returns the micro-batches' mean loss. `plan` and `search` ("none", "model",
    "verify") are those of `sft.compile`; `plan=Plan()` is IREE's own compile of the step. On a
    CPU of several cores the search also offers the batch in parts side by side where the step
    provably sums over its rows (a mean-squared error, not cross-entropy: `Plan.batch_split`).

    `distributed=True` (under `torchrun`, every rank calling it; `process_group` or the default
    group, initialised with gloo from torchrun's environment where the script did not) compiles
    a data-parallel step, as `DistributedDataParallel` trains (`sft/distributed/train.py`):
    `example_batch` is one rank's share, the gradients are averaged over the ranks in buckets
    of at most `bucket_cap_mb` (by default the size the cost model picks for the link it
    measures) before the update, rank 0's parameters and buffers are every rank's at the start,
    and `step.search` gives the predicted compute / communication split; `step.rank_times()`
    each rank's step times, stragglers flagged. `plan` is then a pair: (the gradient program's,
    the update program's).
    """
    target = get_target(target)  # before the trace, which can take a while
    start = time.perf_counter()
    name = f"{type(model).__name__}.train_step"
    settings = {"target": target.name, "max_grad_norm": max_grad_norm,
                "accumulation_steps": accumulation_steps,
                "batch": [(tuple(x.shape), str(x.dtype).removeprefix("torch.")) for x in example_batch]}
    if distributed:
        from .distributed.train import compile_data_parallel, process_group_of, same_start

        group = process_group_of(process_group, name)
        same_start(model, optimizer, group)
        split = trace_train_step(model, loss_fn, optimizer, example_batch, max_grad_norm=max_grad_norm,
                                 accumulation_steps=accumulation_steps, split=True)
        program = compile_data_parallel(split, name, target, plan, search, keep_ir, bucket_cap_mb, group)
        graph = dataclasses.replace(split.gradients, state={**split.gradients.state, **split.update.state})
        settings.update(distributed=True, bucket_cap_mb=bucket_cap_mb,
                        update_plan=program.update.plan.to_json())
        return TrainStep(program, graph, model, optimizer, settings)
    graph = trace_train_step(model, loss_fn, optimizer, example_batch, max_grad_norm=max_grad_norm,
                             accumulation_steps=accumulation_steps)
    program, module = program_from(graph.linalg, name, graph.signature, graph.state,
                                   import_seconds=time.perf_counter() - start)
    compiled = compile_prepared(program, module, target, plan, search, keep_ir)
    return TrainStep(compiled, graph, model, optimizer, settings)


CHECKPOINT_FORMAT = "sft-train-step-1"


def load_train_step(path, model, optimizer, loss_fn, keep_ir: bool = False) -> TrainStep:
    """The training step `TrainStep.save` wrote, resumed: `model` and `optimizer` (built as
    they were for the saved step: same architecture, optimizer class and parameter groups)
    take the saved state, and the step is traced again from them with `loss_fn` and compiled
    with the saved plan and settings (no search). An SftError naming `path` where the file is
    not such a checkpoint or the model's state does not fit it."""
    import pickle

    import torch

    try:
        saved = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as err:
        raise SftError(f"not a checkpoint sft can read ({str(err).splitlines()[0][:120]})", str(path)) from None
    if not isinstance(saved, dict) or saved.get("format") != CHECKPOINT_FORMAT:
        raise SftError("not a file TrainStep.save wrote", str(path))
    try:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    except (RuntimeError, ValueError, KeyError) as err:
        raise SftError(f"the model or optimizer does not fit the checkpoint: "
                       f"{str(err).splitlines()[0][:160]}", str(path)) from None
    settings = saved["settings"]
    batch = tuple(torch.zeros(shape, dtype=getattr(torch, dtype)) for shape, dtype in settings["batch"])
    plan = Plan.from_json(saved["plan"], str(path))
    if settings.get("distributed"):
        plan = (plan, Plan.from_json(settings["update_plan"], str(path)))
    return compile_train_step(model, loss_fn, optimizer, batch, settings["target"], plan,
                              keep_ir=keep_ir, max_grad_norm=settings["max_grad_norm"],
                              accumulation_steps=settings["accumulation_steps"],
                              distributed=bool(settings.get("distributed")),
                              bucket_cap_mb=settings.get("bucket_cap_mb"))
