"""What a layout costs, for `sft-calibrate`: a transposing dispatch against a copy
(`relayout_cost`), an optimizer's update fused into its gradient's dispatch, in order
(`fused_update_cost`) and walked across a weight's rows (`transposed_update_cost`), and a
matmul's weight held packed against held [K, N] (`packed_speedup`), each on one thread, the
two variants taking turns."""

from __future__ import annotations

import numpy as np

from .backend import compile_module, profile
from .backend.bench import Variant, benchmark
from .cost.hardware import TargetDesc
from .ir import iree_ir, parse, print_module
from .passes.hold_packed import UKERNELS_OFF, HoldPackedPass, block_of
from .probe_programs import held_matmul_program, relayout_program, update_program, UPDATE_BODIES
from .space.options import SERIAL_DRIVER


def layout_costs(target, l2_bandwidth: float, rounds: int, progress=None) -> dict:
    """The layout fields of the host's TargetDesc (`relayout_cost`, `transposed_cost`,
    `transposed_op_seconds`, `fused_cost`, `packed_speedup`), measured."""
    transposed, op = transposed_update_cost(target, l2_bandwidth, rounds, progress)
    return {"relayout_cost": relayout_cost(target, rounds, progress),
            "transposed_cost": transposed, "transposed_op_seconds": op,
            "fused_cost": fused_update_cost(target, l2_bandwidth, rounds, progress),
            "packed_speedup": packed_speedup(target, rounds, progress)}


RELAYOUT = (512, 512)  # 1 MiB each way: what a weight's pack moves


def relayout_cost(target, rounds: int, progress=None) -> float:
    """How many times a copy's time a transposing dispatch of `RELAYOUT` takes, inline on one
    thread, the two taking turns (at least 1)."""
    rows, cols = RELAYOUT
    variants = {name: Variant(compile_module(relayout_program(rows, cols, name == "transposed"),
                                             target), SERIAL_DRIVER)
                for name in ("copy", "transposed")}
    seconds = benchmark(variants, [f"{rows}x{cols}xf32"], rounds=rounds, progress=progress)
    if None in seconds.values():
        return TargetDesc.relayout_cost  # not measured: the default
    return max(seconds["transposed"] / seconds["copy"], 1.0)


# A weight gradient at batch 8 and its fused SGD-momentum update, the weight 1024 x 256 and
# 256 x 1024: its rows 4 KiB and 1 KiB apart. On a 2-core Zen 4 VM the update walked across
# rows cost 19.3x and 3.2x its bytes streamed at L2's rate (the four tensors' rows share L1's
# sets at 4 KiB); the geometric mean, 7.7x, is what a JAX MLP step's two such dispatches
# measured (5.6x and 10.3x in the program, 7.6x; at batch 32, 7.7x), where 3.0 was assumed.
# Each shape is timed with AdamW's update too, whose 15 ops a point across rows are what a JAX
# GPT-2 step's four such dispatches spent beyond their bytes there (2.5-6.6 ns a point against
# SGD's 0.9-2.1); on a 2-core Zen 3 VM, 40 ps an op a point at 1024 x 256, none at 256 x 1024.
UPDATE_SHAPES = ((1024, 256, 8), (256, 1024, 8))


def transposed_update_cost(target, l2_bandwidth: float, rounds: int, progress=None) -> tuple[float, float]:
    """What an elementwise update fused into a contraction's dispatch costs walked across rows:
    (a byte, in bytes streamed at `l2_bandwidth`: `TargetDesc.transposed_cost`; an op of its
    body a point, in seconds: `TargetDesc.transposed_op_seconds`). Per shape of
    `UPDATE_SHAPES` and optimizer (SGD-momentum, AdamW: `probe_programs.UPDATE_BODIES`), the
    update program's time held across rows less held in order, inline on one thread, the two
    taking turns; per shape, the two unknowns that give both optimizers' extra time from the
    bytes and ops IREE's profile counts (the bytes' cost at least 1, the ops' at least 0, the
    other solved again where one is held there); the byte costs' geometric mean, the op
    costs' mean."""
    costs, op_costs = [], []
    for m, n, k in UPDATE_SHAPES:
        rows = []  # (transposed bytes at l2_bandwidth, body work, extra seconds) per optimizer
        held = f"{n}x{m}xf32"
        for optimizer, (states, _) in UPDATE_BODIES.items():
            texts = {name: update_program(m, n, k, name == "transposed", optimizer)
                     for name in ("in order", "transposed")}
            variants = {name: Variant(compile_module(text, target), SERIAL_DRIVER) for name, text in texts.items()}
            found = profile(texts["transposed"], target).dispatches
            moved = sum(d.transposed_bytes for d in found)
            seconds = benchmark(variants, [f"{m}x{k}xf32", f"{k}x{n}xf32", *[held] * (1 + len(states))],
                                rounds=rounds, progress=progress)
            if None in seconds.values() or not moved:
                return TargetDesc.transposed_cost, TargetDesc.transposed_op_seconds  # not measured
            rows.append((moved / l2_bandwidth, sum(d.transposed_work for d in found),
                         seconds["transposed"] - seconds["in order"]))
        cost, op_cost = _bytes_and_ops(rows)
        costs.append(cost)
        op_costs.append(op_cost)
    return float(np.exp(np.mean(np.log(costs)))), float(np.mean(op_costs))


def fused_update_cost(target, l2_bandwidth: float, rounds: int, progress=None) -> float:
    """What a byte an update fused into a contraction's dispatch binds beyond the kernel's
    operands costs when it reads them in order, in bytes streamed at `l2_bandwidth`
    (`TargetDesc.fused_cost`): per shape of `UPDATE_SHAPES` and optimizer, the update program
    (in order) less its matmul alone, inline on one thread, a round of each in turn (their
    inputs differ), over the bytes IREE's profile binds beyond the matmul's; the geometric mean,
    at least 1. On a 2-core Zen 3 VM the updates of 256x1024 weights took 3.6x to 7.8x their
    extra bytes' time at L2's rate, where a Zen 4 core had streamed them at about that rate."""
    costs = []
    for m, n, k in UPDATE_SHAPES:
        own = (m * k + k * n + m * n) * 4
        alone = {"alone": Variant(compile_module(held_matmul_program(m, k, n), target), SERIAL_DRIVER)}
        for optimizer, (states, _) in UPDATE_BODIES.items():
            text = update_program(m, n, k, False, optimizer)
            fused = {"fused": Variant(compile_module(text, target), SERIAL_DRIVER)}
            extra = sum(d.bytes for d in profile(text, target).dispatches if d.is_contraction) - own
            inputs = [f"{m}x{k}xf32", f"{k}x{n}xf32"]
            times = _in_turns({"alone": (alone, inputs),
                               "fused": (fused, inputs + [f"{n}x{m}xf32"] * (1 + len(states)))},
                              rounds, progress)
            if times is None or extra <= 0:
                return TargetDesc.fused_cost  # not measured
            costs.append(max((times["fused"] - times["alone"]) / (extra / l2_bandwidth), 1.0))
    return float(np.exp(np.mean(np.log(costs))))


def _in_turns(programs: dict, rounds: int, progress=None) -> dict | None:
    """Median seconds of each {name: (one-variant dict, its inputs)}, a round of each in turn
    (variants with different inputs cannot share a `benchmark` call); None where one failed."""
    times: dict = {name: [] for name in programs}
    for _ in range(rounds):
        for name, (variant, inputs) in programs.items():
            times[name].append(benchmark(variant, inputs, rounds=1)[name])
        if progress:
            progress(len(programs))
    if any(None in t for t in times.values()):
        return None
    return {name: float(np.median(t)) for name, t in times.items()}


def _bytes_and_ops(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(c, o) with streamed * c + work * o = extra for both (streamed, work, extra) rows, c at
    least 1 and o at least 0 (the other fitted to the rows again where one is held)."""
    (s1, w1, e1), (s2, w2, e2) = rows
    det = s1 * w2 - s2 * w1
    cost, op_cost = ((e1 * w2 - e2 * w1) / det, (s1 * e2 - s2 * e1) / det) if det else (0.0, -1.0)
    if op_cost < 0:  # the ops cost nothing that the bytes do not: the bytes alone
        return max((e1 + e2) / (s1 + s2), 1.0), 0.0
    if cost < 1:  # the bytes at least at the streaming rate, the ops the rest
        return 1.0, max((e1 + e2 - s1 - s2) / (w1 + w2), 0.0)
    return cost, op_cost


# (M, K, N) of the matmuls a packed weight's speed-up is read on: an MLP's two layers
PACKED_SHAPES = ((128, 256, 1024), (128, 1024, 256))


def packed_speedup(target, rounds: int, progress=None) -> float:
    """How much faster the matmuls of `PACKED_SHAPES` run with their weight packed (packs
    included: `passes.hold_packed`) than held [K, N], each at IREE's code on one thread
    (geometric mean; the two take different inputs, so they take turns a round at a time)."""
    m0, n0 = block_of(target.desc)
    ratios = []
    for m, k, n in PACKED_SHAPES:
        text = held_matmul_program(m, k, n)
        module = parse(iree_ir.Context(), text)
        HoldPackedPass(((1, m0, n0),))(module)
        held = {"held": Variant(compile_module(text, target), SERIAL_DRIVER)}
        packed = {"packed": Variant(compile_module(print_module(module), target, (UKERNELS_OFF,)),
                                    SERIAL_DRIVER)}
        times = _in_turns({"held": (held, [f"{m}x{k}xf32", f"{k}x{n}xf32"]),
                           "packed": (packed, [f"{m}x{k}xf32", f"{n // n0}x{k}x{n0}x1xf32"])},
                          rounds, progress)
        if times is None:
            return 1.0  # not measured: nothing is packed
        ratios.append(times["held"] / times["packed"])
    return float(np.exp(np.mean(np.log(ratios))))
