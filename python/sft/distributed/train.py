"""A data-parallel training step: `sft.compile_train_step(..., distributed=True)` under
`torchrun` (any torch.distributed process group: gloo on CPUs, NCCL on GPUs).

Every rank runs the same two compiled programs, split where the gradients are complete: the
forward and backward on its share of the batch, the mean of the gradients over the ranks through
`torch.distributed` (bucketed, `collective.Buckets`), then the optimizer's update (clipping
included) on the mean. So parameters and optimizer state stay equal on every rank, and equal to
one process's on the ranks' batches concatenated (for a loss that is a mean over the batch), as
`DistributedDataParallel` keeps them. As DDP does by default (`broadcast_buffers=True`), the
buffers a train-mode forward updates (batch norm's running statistics) follow rank 0's.

Rank 0 searches and compiles; the others compile its plans (from the compile cache when the
ranks share a machine), so every rank runs the same program.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import statistics
import time
from dataclasses import dataclass

from ..api import compile_prepared
from ..backend.runtime import WORKERS_ENV
from ..compiled import CompiledModel
from ..errors import SftError
from ..importers.torch_train import SplitTrainGraph
from ..plan import Plan
from ..program import program_from
from ..search.exhaustive import SearchReport
from ..search.strategy import search_plan
from ..targets import Target
from .collective import Buckets, Link, allreduce_mean, choose_buckets, measure_link

# Step times kept per rank for `rank_times` (the recent ones: a straggler is a rank slow now).
RECENT_STEPS = 50
STRAGGLER_FACTOR = 1.3


@dataclass
class DataParallelReport:
    """What was searched and predicted for a data-parallel step: each program's search (rank
    0's; None where nothing was searched), the buckets, the link, and the predicted split of
    a step's time between compute and communication."""

    gradients: SearchReport | None
    update: SearchReport | None
    buckets: Buckets
    bucket_count: int
    gradient_bytes: int
    ranks: int
    link: Link
    predicted_compute: float        # seconds: both programs, as the cost model predicts them
    predicted_communication: float  # seconds: the buckets' all-reduces

    def to_text(self) -> str:
        total = self.predicted_compute + self.predicted_communication
        lines = [f"data parallel over {self.ranks} ranks: {self.gradient_bytes / 1e6:.2f} MB of "
                 f"gradients in {self.bucket_count} bucket(s) of at most "
                 f"{self.buckets.cap_bytes / 1e6:.2f} MB, all-reduced after the gradient program",
                 f"  link: latency {self.link.latency * 1e6:.1f} us, bus bandwidth "
                 f"{self.link.bandwidth / 1e9:.2f} GB/s ({self.link.source})",
                 f"  predicted per step: compute {self.predicted_compute * 1e3:.3f} ms, "
                 f"communication {self.predicted_communication * 1e3:.3f} ms "
                 f"({100 * self.predicted_communication / total if total else 0:.0f}% of the step)"]
        for part, report in (("gradient program", self.gradients), ("update program", self.update)):
            if report is not None:
                lines.append(f"{part}: " + report.to_text().replace("\n", "\n  "))
        return "\n".join(lines)


class DataParallelProgram:
    """The two compiled programs of a data-parallel step and the all-reduce between them,
    called as `TrainStep` calls a `CompiledModel`: `(*batch, *hyper-parameters[, seed])` in,
    the loss (or the loss and the loss function's other results) out; `state_dict` and
    `load_state_dict` over the state of both."""

    def __init__(self, gradients: CompiledModel, update: CompiledModel, graph: SplitTrainGraph,
                 report: DataParallelReport, group=None):
        import torch.distributed as dist

        self.gradients, self.update, self.graph, self.search = gradients, update, graph, report
        self._group = group
        self._rank = dist.get_rank(group)
        self._trained = graph.gradients.parameters
        self._mutated = [r.value for r in graph.gradients.signature.results if r.kind == "state"]
        sizes = [graph.update.state[n].nbytes for n in self._trained]
        self._buckets = report.buckets.assign(sizes)
        self._times = collections.deque(maxlen=RECENT_STEPS)

    plan = property(lambda self: self.gradients.plan)
    stages = property(lambda self: self.gradients.stages)
    dispatch_count = property(lambda self: self.gradients.dispatch_count + self.update.dispatch_count)
    seconds = property(lambda self: {k: self.gradients.seconds.get(k, 0) + self.update.seconds.get(k, 0)
                                     for k in {*self.gradients.seconds, *self.update.seconds}})

    def __call__(self, *inputs):
        import torch
        import torch.distributed as dist

        part = self.graph.gradients
        batch, rest = inputs[:part.batch_size], inputs[part.batch_size:]
        hyper, seed = (rest[:-1], rest[-1:]) if part.seeded else (rest, ())
        start = time.perf_counter()
        outs = self.gradients(*batch, *seed)
        outs = outs if isinstance(outs, tuple) else (outs,)
        results = len(outs) - len(self._trained)
        grads = [torch.as_tensor(g) for g in outs[results:]]
        computed = time.perf_counter()
        grads = allreduce_mean(grads, self._buckets, self._group)
        if self._mutated:  # DDP's broadcast_buffers: every rank's buffers are rank 0's
            buffers = self.gradients.state_dict(self._mutated)
            for name in self._mutated:
                dist.broadcast(buffers[name], root(self._group), group=self._group)
            self.gradients.load_state_dict(buffers)
        communicated = time.perf_counter()
        self.update(*[g.numpy() for g in grads], *hyper)
        self.gradients.take_state(self.update, self._trained)
        done = time.perf_counter()
        self._times.append((done - start, (computed - start) + (done - communicated),
                            communicated - computed))
        return outs[0] if results == 1 else outs[:results]

    def state_dict(self, names=None) -> dict:
        """The state of both programs (the trained parameters as the update left them)."""
        return {**self.gradients.state_dict(names), **self.update.state_dict(names)}

    def load_state_dict(self, state_dict) -> None:
        """New values for any state of either program; a name neither has is an SftError."""
        mine = {n for n, _, _ in (*self.gradients.signature.state, *self.update.signature.state)}
        unknown = [k for k in state_dict if k not in mine]
        if unknown:
            raise SftError(f"load_state_dict: unknown names {unknown[:5]}")
        for program in (self.gradients, self.update):
            program.load_state_dict(state_dict, strict=False)

    def rank_times(self, factor: float = STRAGGLER_FACTOR) -> list[dict]:
        """Every rank's median step time over its recent steps (a collective: every rank calls
        it), split into compute and communication, each rank flagged `straggler` where its
        compute is slower than its peers' median by more than `factor` (communication is not
        compared: a fast rank waits for a slow one inside the all-reduce)."""
        import torch.distributed as dist

        from .stragglers import find_stragglers

        mine = {"rank": self._rank, "steps": len(self._times)}
        if self._times:
            for i, key in enumerate(("step_s", "compute_s", "communication_s")):
                mine[key] = statistics.median(t[i] for t in self._times)
        every = [None] * dist.get_world_size(self._group)
        dist.all_gather_object(every, mine, group=self._group)
        slow = set(find_stragglers({r["rank"]: r.get("compute_s") for r in every}, factor))
        return [{**r, "straggler": r["rank"] in slow} for r in every]


def process_group_of(group, name: str):
    """`group`, or the default process group, initialised with gloo from torchrun's
    environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) where the script did not; an
    SftError where there is neither."""
    import torch.distributed as dist

    if group is not None:
        return group
    if not dist.is_available():
        raise SftError("distributed=True needs torch.distributed, which this torch lacks", name)
    if not dist.is_initialized():
        if not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} <= set(os.environ):
            raise SftError("distributed=True runs on a torch.distributed process group: launch the "
                           "script with `torchrun --nproc-per-node N script.py` (or call "
                           "torch.distributed.init_process_group first)", name)
        dist.init_process_group("gloo")
    return None


def root(group) -> int:
    """The global rank of `group`'s rank 0 (torch.distributed's `src` is a global rank)."""
    import torch.distributed as dist

    return 0 if group is None else dist.get_global_rank(group, 0)


def same_start(model, optimizer, group=None) -> None:
    """Rank 0's parameters, buffers and optimizer state on every rank, in place, as
    DistributedDataParallel's constructor makes them."""
    import torch
    import torch.distributed as dist

    tensors = [*model.parameters(), *model.buffers()]
    for p in (p for g in optimizer.param_groups for p in g["params"]):
        tensors += [v for _, v in sorted(optimizer.state.get(p, {}).items())
                    if isinstance(v, torch.Tensor)]
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t.data, root(group), group=group)


def rank_target(target: Target) -> Target:
    """`target` as one of torchrun's LOCAL_WORLD_SIZE ranks on this machine has it: on the
    CPU, its share of the cores, for the cost model and for IREE's parallel executor (whose
    worker count is set for this process: `backend.runtime.WORKERS_ENV`)."""
    here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if here <= 1 or target.driver != "local-task":
        return target
    cores = max(1, target.desc.cores // here)
    os.environ[WORKERS_ENV] = str(cores)
    return dataclasses.replace(target, desc=dataclasses.replace(target.desc, cores=cores))


def compile_data_parallel(graph: SplitTrainGraph, name: str, target: Target, plan, search: str,
                          keep_ir: bool, bucket_cap_mb: float | None, group=None) -> DataParallelProgram:
    """Compile the step's two programs on every rank of `group` (rank 0 searches, the others
    take its plans) and choose the buckets from the link measured on the group. `plan`: None,
    or (gradient program's plan, update program's plan)."""
    import torch.distributed as dist

    target = rank_target(target)
    link = measure_link(group)
    ranks = dist.get_world_size(group)
    sizes = [graph.update.state[n].nbytes for n in graph.gradients.parameters]
    if bucket_cap_mb is not None and not bucket_cap_mb > 0:
        raise SftError(f"bucket_cap_mb must be a positive number of MB, not {bucket_cap_mb!r}", name)
    buckets = (Buckets(int(bucket_cap_mb * (1 << 20))) if bucket_cap_mb is not None
               else choose_buckets(sizes, ranks, link))
    parts = [(graph.gradients, "gradients"), (graph.update, "update")]
    plans = list(plan) if plan is not None else [None, None]
    shared = [None]
    if dist.get_rank(group) == 0:
        compiled, predicted = [], 0.0
        for (part, suffix), given in zip(parts, plans):
            program, module = program_from(part.linalg, f"{name}.{suffix}", part.signature, part.state)
            sft_text = program.sft_text
            compiled.append(compile_prepared(program, module, target, given, search, keep_ir))
            predicted += _predicted(compiled[-1], sft_text, target)
        shared = [([c.plan.to_json() for c in compiled], predicted)]
    dist.broadcast_object_list(shared, root(group), group=group)  # rank 0's plans for every rank
    plan_texts, predicted = shared[0]
    if dist.get_rank(group) != 0:
        compiled = [compile_prepared(*program_from(part.linalg, f"{name}.{suffix}", part.signature,
                                                   part.state),
                                     target, Plan.from_json(text), "none", keep_ir)
                    for (part, suffix), text in zip(parts, plan_texts)]
    report = DataParallelReport(compiled[0].search, compiled[1].search, buckets,
                                len(buckets.assign(sizes)), sum(sizes), ranks, link, predicted,
                                buckets.predicted(sizes, ranks, link))
    return DataParallelProgram(*compiled, graph, report, group)


def _predicted(compiled: CompiledModel, sft_text: str, target: Target) -> float:
    """The cost model's seconds for a compiled program's plan: from its search's report, or
    from a search of the program (`sft_text`) where it was not searched."""
    # unsearched (IREE's default plan): IREE's default options alone are profiled and scored
    report = compiled.search or search_plan(sft_text, dataclasses.replace(target, options=target.options[:1]))[1]
    plan = compiled.plan
    if plan != Plan():
        for option in report.ranked:
            if (option.options.flags, option.options.driver) == (plan.flags, plan.driver):
                return option.predicted
    return report.default_predicted
