"""sft-bench train: milliseconds per training step (forward, loss, backward, optimizer update).

Variants, each timed in a process of its own, taking turns round after round (medians):
  eager          PyTorch: loss.backward(); opt.step(); opt.zero_grad()
  torch_compile  torch.compile of that same eager step
  iree           IREE's own compile of the traced step (torch-mlir's linalg as it is, no sft),
                 its state kept on the device as sft keeps it
  model, verify  sft.compile_train_step with search="model" and search="verify"
The jax_ cases (bench_train_jax.py) are JAX training steps timed under jax_jit, iree, model and
verify, rows of the same table and JSON. Ratios are speed-ups (higher is faster).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .bench_ratios import bound_seconds, geomean, of_bound, ratios, summarize
from .bench_train_jax import JAX_TRAIN_SUITE


@dataclass(frozen=True)
class TrainCase:
    """A model, its loss, its optimizer and a batch to train it on."""

    name: str
    build: Callable          # () -> torch.nn.Module (seeded, in the mode it trains in)
    loss: Callable           # (output, target) -> 0-d loss
    optimizer: Callable      # (parameters) -> torch.optim.Optimizer
    batch: Callable          # () -> (*inputs, target)


def _ce(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits, target)


def _ce_tokens(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def _sgd(params):
    import torch

    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def _adamw(params):
    import torch

    return torch.optim.AdamW(params, lr=1e-3)


def _seeded(make):
    def build():
        import torch

        torch.manual_seed(0)
        return make().train()
    return build


def _mlp():
    from ..models import MLP

    return MLP((256, 1024, 256))


def _gpt(**kw):
    from ..models import GPT2Block

    return lambda: GPT2Block(**kw)


def _cnn():
    import torch

    from ..models import ConvBlock

    return torch.nn.Sequential(ConvBlock(3, 16), torch.nn.Linear(16, 10))


def _floats_and_classes(shape, classes, target_shape):
    def batch():
        import torch

        g = torch.Generator().manual_seed(1)
        return (torch.randn(*shape, generator=g), torch.randint(0, classes, target_shape, generator=g))
    return batch


def _tokens(vocab, b, t):
    def batch():
        import torch

        g = torch.Generator().manual_seed(1)
        return (torch.randint(0, vocab, (b, t), generator=g), torch.randint(0, vocab, (b, t), generator=g))
    return batch


TORCH_TRAIN_SUITE: dict[str, TrainCase] = {c.name: c for c in [
    *[TrainCase(f"mlp_b{b}", _seeded(_mlp), _ce, _sgd, _floats_and_classes((b, 256), 256, (b,)))
      for b in (8, 32, 128)],
    TrainCase("gpt2_block", _seeded(_gpt()), _ce_tokens, _adamw, _tokens(512, 2, 32)),
    TrainCase("gpt2_block_large", _seeded(_gpt(vocab=1024, dim=256, heads=8, max_len=128)),
              _ce_tokens, _adamw, _tokens(1024, 2, 64)),
    TrainCase("cnn", _seeded(_cnn), _ce, _sgd, _floats_and_classes((8, 3, 32, 32), 10, (8,))),
]}
# Every case sft-bench train knows, by name: the torch ones, then the JAX ones.
TRAIN_SUITE: dict = {**TORCH_TRAIN_SUITE, **JAX_TRAIN_SUITE}


# Builders run in the timing worker processes: each returns the callable to time (one step).
def _torch_step(name: str, compiled: bool):
    import torch

    case = TRAIN_SUITE[name]
    model = case.build()
    opt, (*inputs, target) = case.optimizer(model.parameters()), case.batch()

    def step():
        loss = case.loss(model(*inputs), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return torch.compile(step) if compiled else step


def _iree_step(name: str):
    """IREE alone on the traced step: torch-mlir's linalg compiled as it is; the updated state
    is passed back to the next call on the device, and the loss read back, as sft does."""
    from ..backend import compile_module, load
    from ..targets import get_target
    from ..backend.runtime import to_host
    from ..importers.torch_train import trace_train_step
    from ..values import to_numpy

    case = TRAIN_SUITE[name]
    model = case.build()
    batch = case.batch()
    opt = case.optimizer(model.parameters())
    graph = trace_train_step(model, case.loss, opt, batch)
    fn = load(compile_module(graph.linalg, get_target("host")))
    names = list(graph.state)
    state = [fn.upload(to_numpy(v)) for v in graph.state.values()]
    where = [names.index(r.value) for r in graph.signature.results[1:]]
    arrays = [to_numpy(x) for x in batch]
    count = [float(graph.state["step"])]

    def step():
        count[0] += 1
        hyper = graph.update.hyper_inputs(opt, count[0])  # read at each step, as sft's step does
        loss, *new = fn.call_on_device(*state, *arrays, *hyper)
        for i, value in zip(where, new):
            state[i] = value
        return to_host(loss)
    return step


def _sft_step(name: str, search: str):
    from ..train import compile_train_step
    from ..values import to_numpy

    case = TRAIN_SUITE[name]
    model = case.build()
    batch = case.batch()
    step = compile_train_step(model, case.loss, case.optimizer(model.parameters()), batch,
                              search=search)  # replays the parent's search
    arrays = [to_numpy(x) for x in batch]
    return lambda: step(*arrays)


def _matches(case: TrainCase, step, steps: int = 3) -> bool:
    """The compiled step's losses against PyTorch's own steps on a copy of the model."""
    model = case.build()
    opt, batch = case.optimizer(model.parameters()), case.batch()
    ok = True
    for _ in range(steps):
        got = float(step(*batch))
        loss = case.loss(model(*batch[:-1]), batch[-1])
        loss.backward()
        opt.step()
        opt.zero_grad()
        ok &= bool(np.isclose(got, loss.item(), rtol=1e-4, atol=1e-6))
    return ok


def _torch_case(name: str, rounds: int, calls: int, use_torch_compile: bool,
                processes: int = 1) -> dict:
    """One torch case: searched here (model, verify), checked against PyTorch, then every
    variant timed in `processes` processes of its own. Returns its row."""
    from ..backend.timing import time_in_processes
    from ..train import compile_train_step

    case = TORCH_TRAIN_SUITE[name]
    row = {"model": name, "framework": "torch", "ok": True}
    for mode in ("model", "verify"):  # searched here once; the workers replay it
        model = case.build()
        step = compile_train_step(model, case.loss, case.optimizer(model.parameters()),
                                  case.batch(), search=mode, keep_ir=True)
        row["ok"] &= _matches(case, step)
        row["bound_s"] = bound_seconds(step.stages.linalg)
        row[f"{mode}_plan"] = json.loads(step.plan.to_json())
        row[f"{mode}_search"] = step.search.to_dict() if step.search else {}
        row["dispatches"] = step.dispatch_count
    # iree_again: IREE's module once more, in a process of its own: the row's control
    builders = {"eager": (_torch_step, (name, False)), "iree": (_iree_step, (name,)),
                "model": (_sft_step, (name, "model")), "verify": (_sft_step, (name, "verify")),
                "iree_again": (_iree_step, (name,))}
    if use_torch_compile:
        builders["torch_compile"] = (_torch_step, (name, True))
    times, errors = time_in_processes(builders, rounds, calls, timeout=600.0, processes=processes)
    row.update({f"{k}_s": v for k, v in times.items()}, errors=errors)
    best = min((t for t in (times.get("eager"), times.get("torch_compile")) if t), default=None)
    row.update(ratios(times), model_over_best_torch=best / times["model"]
               if best and times.get("model") else float("nan"))
    return row


def train(models: list[str], rounds: int, calls: int, use_torch_compile: bool = True,
          processes: int = 1) -> dict:
    """Time one training step of each model in `models` (names of TRAIN_SUITE: torch and JAX
    cases) under every variant, each in `processes` processes of its own (the median of theirs);
    prints a table and returns every number (rows and geomean summary). ref is PyTorch eager for a torch row, jax.jit for a JAX row; verify/ref and
    model/ref are over the faster of eager and torch.compile (torch), over jax.jit (JAX)."""
    from ..errors import SftError
    from .bench_train_jax import run_case

    header = (f"{'model':<18}{'ok':>3}{'disp':>5}{'chosen (verify)':>34}{'ref':>8}{'t.comp':>8}"
              f"{'iree':>8}{'model':>8}{'verify':>8}{'verify/iree':>12}{'model/iree':>11}"
              f"{'model/verify':>13}{'verify/ref':>11}{'model/ref':>10}{'control':>9}{'bound':>8}"
              f"{'verify/bound':>13}")
    print(header + "\n" + "-" * len(header), flush=True)
    rows = []
    for name in models:
        jax_row = name in JAX_TRAIN_SUITE
        try:
            row = (run_case(name, rounds, calls, processes) if jax_row
                   else _torch_case(name, rounds, calls, use_torch_compile, processes))
        except SftError as err:  # one row that cannot be measured does not end the table
            print(f"{name:<18}{'N':>3}  failed: {str(err).splitlines()[0]}", flush=True)
            continue
        rows.append(row)
        ms = lambda k: f"{row[k + '_s'] * 1e3:8.3f}" if row.get(k + "_s") else f"{'-':>8}"
        ref = ("verify_over_jax_jit", "model_over_jax_jit") if jax_row else \
            ("verify_over_best_torch", "model_over_best_torch")
        chosen = row["verify_search"].get("chosen", "")[:33]
        print(f"{name:<18}{'y' if row['ok'] else 'N':>3}{row['dispatches']:>5}{chosen:>34}"
              f"{ms('jax_jit' if jax_row else 'eager')}{ms('torch_compile')}{ms('iree')}"
              f"{ms('model')}{ms('verify')}{row['verify_over_iree']:>11.2f}x"
              f"{row['model_over_iree']:>10.2f}x{row['model_over_verify']:>12.2f}x"
              f"{row[ref[0]]:>10.2f}x{row[ref[1]]:>9.2f}x{row['control']:>8.2f}x{ms('bound')}"
              f"{of_bound(row.get('verify_s'), row.get('bound_s')):>13}", flush=True)
        for variant, err in row["errors"].items():
            print(f"  {variant} failed: {err.strip().splitlines()[-1]}", flush=True)
    summary = summarize(rows)
    for key in ("model_over_best_torch", "verify_over_jax_jit", "model_over_jax_jit"):
        summary[key] = geomean([r.get(key) for r in rows])
    print("\ngeomean: " + ", ".join(f"{k} {v:.2f}x" for k, v in summary.items()
                                    if isinstance(v, float) and not math.isnan(v)))
    for search in ("verify", "model"):
        print(f"{search} slower than IREE beyond the control's spread: "
              f"{summary[f'{search}_slower_beyond_noise'] or 'none'}")
    per = "one process per variant" if processes == 1 else f"the median of {processes} processes per variant"
    print(f"columns: ms per training step (medians of interleaved rounds, {per}); "
          "ref: PyTorch eager (torch rows) or jax.jit (jax_ rows); verify/ref, model/ref: "
          "speed-up over the faster of eager and torch.compile (torch rows), over jax.jit (jax_ "
          "rows: each variant's state stays on its device, its new values passed back each step); "
          "control: IREE's module timed again in another process over the first (1.00x but "
          "for noise); "
          "bound: the roofline bound on every core (each dispatch's FLOPs at the calibrated peak "
          "or its bytes at the bandwidth of where they live), verify/bound: verify's time "
          "over it")
    return {"rows": rows, "summary": summary}
