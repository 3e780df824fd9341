"""A training step as functions of tensors, for make_fx to trace: the joint graph (forward and
backward) over micro-batches, then the optimizer's update; whole, or split where the gradients
are complete (a data-parallel step all-reduces them in between)."""

from __future__ import annotations

import functools
import operator

from ..errors import SftError
from .torch_optim import HYPER, Update, apply_update

_MICRO_SEED_STRIDE = 1_000_003  # micro-batch i draws its masks from seed + i * this


def micro_batch(batch: tuple, steps, name: str) -> tuple:
    """The first of `steps` micro-batches of `batch` (each tensor chunked along dim 0), whose
    shapes the joint graph is traced at; an SftError unless `steps` is a positive int that
    divides every tensor's first dimension."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SftError(f"accumulation_steps must be a positive int, not {steps!r}", name)
    for i, x in enumerate(batch):
        if steps > 1 and (x.dim() == 0 or x.shape[0] % steps):
            raise SftError(f"accumulation_steps={steps} must divide example_batch[{i}]'s first "
                           f"dimension, of shape {tuple(x.shape)}", name)
    return tuple(x[:x.shape[0] // steps] for x in batch)


def _gradients(joint, values: dict, batch: tuple, seed: tuple, micros: int):
    """The joint graph on each of `micros` micro-batches of `batch` in turn (the buffers it
    updates carried from one to the next), the gradients of loss / k summed as k `backward()`
    calls accumulate them. Returns (the micro-batches' mean loss, the loss function's other
    results, gradients by parameter name, the buffers' new values). `seed`: () or the dropout
    seed, offset per micro-batch."""
    buffers = {b: values[b] for b in joint.buffers}
    losses, grads = [], {}
    for i, micro in enumerate(zip(*(x.chunk(micros) for x in batch))):
        offset = tuple(s + i * _MICRO_SEED_STRIDE for s in seed)
        outs = joint.gm(*[values[p] for p in joint.parameters], *buffers.values(), *micro, *offset)
        by_name = dict(zip(joint.outputs, outs))
        buffers.update({b: by_name[o] for b, o in joint.mutated.items()})
        losses.append(by_name[joint.loss])
        # a tied parameter's gradient is the sum of its uses'
        for p, outs_of in joint.grads.items():
            g = functools.reduce(operator.add, (by_name[o] for o in outs_of))
            grads[p] = g if p not in grads else grads[p] + g
    if micros > 1:
        grads = {p: g / micros for p, g in grads.items()}
    loss = functools.reduce(operator.add, losses) / micros if micros > 1 else losses[0]
    return loss, [by_name[a] for a in joint.aux], grads, buffers


def _updated(update: Update, values: dict, grads: dict, hyper, max_grad_norm: float | None) -> dict:
    """The optimizer's step: the gradients clipped where asked, then each group's update with
    its own hyper-parameters. Returns the new parameters, optimizer state and step count."""
    import torch

    per_group = len(HYPER[update.kind])
    step = values["step"]
    if max_grad_norm is not None:  # torch.nn.utils.clip_grad_norm_'s arithmetic
        norms = torch.stack([torch.linalg.vector_norm(g, 2) for g in grads.values()])
        coef = torch.clamp(max_grad_norm / (torch.linalg.vector_norm(norms, 2) + 1e-6), max=1.0)
        grads = {k: g * coef for k, g in grads.items()}
    new = {"step": step + 1}
    for i, group in enumerate(update.groups):
        h = dict(zip(HYPER[update.kind], hyper[i * per_group:(i + 1) * per_group]))
        for k in group.params:
            mine = {slot: values[f"{slot}.{k}"] for slot in update.slots(group)}
            new[k], mine = apply_update(update, group, h, values[k], grads[k], mine, step)
            new.update({f"{slot}.{k}": v for slot, v in mine.items()})
    return new


def step_function(joint, update: Update, state_names: list[str], batch_size: int,
                   results: list[str], max_grad_norm: float | None, accumulation_steps: int = 1,
                   seeded: bool = False):
    """The step as a function of (*state, *batch, *hyper-parameters[, seed]) -> (loss, *aux,
    *the new value of each state tensor named in `results`): `_gradients` then `_updated`."""

    def step_fn(*args):
        values = dict(zip(state_names, args))
        batch = args[len(state_names):len(state_names) + batch_size]
        hyper = args[len(state_names) + batch_size:len(args) - seeded]
        seed = (args[-1],) if seeded else ()
        loss, aux, grads, buffers = _gradients(joint, values, batch, seed, accumulation_steps)
        new = {**_updated(update, values, grads, hyper, max_grad_norm),
               **{b: buffers[b] for b in joint.mutated}}
        return (loss, *aux, *[new[n] for n in results])

    return step_fn


def split_functions(joint, update: Update, grad_state: list[str], update_state: list[str],
                     trained: list[str], batch_size: int, results: list[str],
                     max_grad_norm: float | None, accumulation_steps: int, seeded: bool):
    """The step as two functions, split where the gradients are complete (a data-parallel
    step all-reduces them in between): (*grad_state, *batch[, seed]) -> (loss, *aux, *the
    gradient of each of `trained`, *the buffers the forward updates), and (*update_state,
    *gradients, *hyper-parameters) -> the new value of each of `results`. Clipping is in the
    second: it reads the all-reduced gradients, as clip_grad_norm_ after DDP's backward does."""

    def gradients_fn(*args):
        values = dict(zip(grad_state, args))
        batch = args[len(grad_state):len(grad_state) + batch_size]
        seed = (args[-1],) if seeded else ()
        loss, aux, grads, buffers = _gradients(joint, values, batch, seed, accumulation_steps)
        return (loss, *aux, *[grads[p] for p in trained], *[buffers[b] for b in joint.mutated])

    def update_fn(*args):
        values = dict(zip(update_state, args))
        grads = dict(zip(trained, args[len(update_state):len(update_state) + len(trained)]))
        hyper = args[len(update_state) + len(trained):]
        new = _updated(update, values, grads, hyper, max_grad_norm)
        return tuple(new[n] for n in results)

    return gradients_fn, update_fn
