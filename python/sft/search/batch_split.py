"""The splits as search decisions (`passes/split_batch.py`): of the batch (`Plan.batch_split`:
which arguments carry it and in how many parts) or of the weights (`Plan.weight_split`: which
dim of which parameters, each part holding its share), and the split's plan from a search of
the program for one part.

A split runs its parts on one thread each (`backend/parts.py`), so the part's plan is the best
predicted among the option sets on IREE's local-sync, priced at that prediction (never below
the time the parts take to read what each reads whole: `shared_seconds`) plus what the split
itself costs on this host (`split_overhead`: the hand-over measured here). It competes with
the whole program's pick: under the trust gate with search="model" (`Trust`'s "split" kind),
timed side by side with search="verify".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..backend.parts import JOIN_SECONDS, in_processes, split_overhead
from ..errors import SftError
from ..ir import print_module
from ..passes.split_batch import SplitBatchPass, SplitLayout, split_layout
from ..plan import Plan
from ..program import Program
from ..targets import Target
from ..values import argument_specs, updated_results
from .candidates import packed_option


def batch_split_of(program: Program, target: Target) -> tuple[int, ...]:
    """(parts, argument, ...) for `program` on `target`: the user inputs whose dim 0 is the
    batch, in the most parts up to the target's cores that divide it; () where a split is not
    offered (one core, a GPU, state written in place) or no batch makes the program's rows
    independent, or its state's update a function of sums over them (`split_batch`'s proof).
    The batch is the first dim-0 extent, from the last input back (a JAX function's parameters
    come before its data), that the proof accepts with every input of that extent cut, else
    with the last inputs of that extent alone (a bias as long as the batch is a parameter)."""
    sig = program.signature
    if not target.split_batches or target.desc.cores < 2 or program.storage_pairs(target):
        return ()
    updates = updated_results(sig)
    shapes = [shape for shape, _ in sig.inputs]
    for batch in dict.fromkeys(s[0] for s in reversed(shapes) if s):
        parts = max((p for p in range(2, target.desc.cores + 1) if batch % p == 0), default=0)
        every = [i for i, s in enumerate(shapes) if s and s[0] == batch]
        last = [i for i in every if all(s and s[0] == batch for s in shapes[i:])]
        for cut in dict.fromkeys([tuple(every), tuple(last)]):
            split = (parts, *(len(sig.state) + i for i in cut))
            try:
                layout = split_layout(program.module(), (parts, tuple((a, 0) for a in split[1:])),
                                      updates) if parts and cut else None
            except SftError:
                continue
            if layout and layout.updates_once():
                return split
    return ()


WEIGHT_EXTENTS = 4  # the dims a weight split tries (by the bytes they cut)
WEIGHT_TRIES = 8  # proofs a weight split's search runs at most for one dim


def weight_split_of(program: Program, target: Target) -> tuple[int, ...]:
    """(parts, argument, dim, ...) for `program` on `target`: the model's parameters cut along
    a dim they share (a layer's outputs, the next layer's inputs: Megatron's column and row
    split), each part holding its share of them and summing its share of what the next
    layer sums, in the most parts up to the target's cores that divide it; () where none is
    offered (one core, a GPU, a program that updates state or writes it in place) or the proof
    refuses every cut. Dims are tried by the bytes of parameters they cut, most first (the
    first `WEIGHT_EXTENTS`); for each, the cut grows from one parameter (the largest first)
    by what the proof says it needs cut too (the bias, the next layer's weight), so that
    another parameter of the same extent (GPT-2's vocabulary, as long as its hidden layer)
    stays whole. A parameter with two dims of the extent (a square weight) is not a seed."""
    sig = program.signature
    if (not target.split_batches or target.desc.cores < 2 or program.storage_pairs(target)
            or updated_results(sig)):
        return ()
    size = lambda shape, dtype: math.prod(shape) * np.dtype(dtype).itemsize  # noqa: E731
    cut_bytes: dict[int, int] = {}
    for _, shape, dtype in sig.state:
        for extent in set(shape):
            cut_bytes[extent] = cut_bytes.get(extent, 0) + size(shape, dtype)
    module = program.module()  # (read, never changed, by every proof below)
    for extent in sorted(cut_bytes, key=lambda e: -cut_bytes[e])[:WEIGHT_EXTENTS]:
        parts = max((p for p in range(2, target.desc.cores + 1) if extent % p == 0), default=0)
        seeds = sorted((i for i, (_, shape, _) in enumerate(sig.state) if shape.count(extent) == 1),
                       key=lambda i: -size(*sig.state[i][1:]))
        tried: set = set()
        for seed in seeds if parts else ():
            cuts = {seed: sig.state[seed][1].index(extent)}
            while frozenset(cuts.items()) not in tried and len(tried) < WEIGHT_TRIES:
                tried.add(frozenset(cuts.items()))
                try:
                    layout = split_layout(module, (parts, tuple(sorted(cuts.items()))))
                except SftError as refusal:
                    need = getattr(refusal, "uncut", None)
                    if (need is not None and need[0] < len(sig.state) and need[0] not in cuts
                            and sig.state[need[0]][1][need[1]] == extent):
                        cuts[need[0]] = need[1]
                    continue
                if layout.sums:  # the parts sum what follows: a split of the weights, not rows
                    return (parts, *(x for cut in sorted(cuts.items()) for x in cut))
                break
    return ()


def part_text(program: Program, split: tuple) -> str:
    """The sft text of the program for one part of its split ((parts, cuts): `split_of`)."""
    module = program.module()
    SplitBatchPass(*split)(module)
    return print_module(module)


def shared_seconds(program: Program, split: tuple, target: Target) -> float:
    """What the parts of a split ((parts, cuts)) read that the whole program reads once: every
    argument not cut (a batch split's weights), read by each part at the memory's rate. The
    part's kernels are priced with their operands warm in their core's L2, as timed alone;
    side by side, each part takes the weights from the memory the cores share, and no part is
    faster than that. The 256-1024-256 MLP on the Xeon VM: at batch 32 a part of 16 rows 237
    us alone, the two side by side 519, the whole on one thread 367; at batch 128 the split
    0.77 ms, the whole on both cores 1.09."""
    cut = {a for a, _ in split[1]}
    shared = sum(math.prod(shape) * np.dtype(dtype).itemsize
                 for i, (shape, dtype) in enumerate(argument_specs(program.signature))
                 if i not in cut)
    return split[0] * shared / target.desc.dram_bandwidth


@dataclass(frozen=True)
class SplitPick:
    """A split plan: its name among verify's candidates, the plan, its predicted seconds a
    call, the report's words for it, its layout and the search report of the program for one
    part (whose op ids the plan's other decisions name)."""

    name: str
    plan: Plan
    predicted: float
    words: str
    layout: SplitLayout
    report: object


def split_picks(report, split: tuple[int, ...], plan_of_option, target: Target, shared: float = 0.0,
                layout: SplitLayout | None = None, field: str = "batch_split") -> list[SplitPick]:
    """The split's plans (`split` the value of the plan's `field`), from the search `report`
    of the program for one part: the best predicted option set on one thread of each dispatch
    formation (`plan_of_option(report, option)` builds the plan), and each again with the
    weights it holds packed where the model prices that faster on `target` (`packed_option`),
    best first; the first is the model's pick, verify times them all (mlp_b128's part: plain
    tiles predicted best, data tiling measured 10% faster on one thread). Each is priced at
    its part's prediction or `shared` (`shared_seconds`), whichever is longer, and what the
    split itself costs as its `layout` runs (`split_cost`)."""
    beyond = split_cost(split[0], layout)
    best = {}
    for option in sorted((o for o in report.ranked if o.options.serial), key=lambda o: o.predicted):
        best.setdefault(option.options.formation_flags, option)
    found = []
    for i, option in enumerate(best.values()):
        plain = plan_of_option(report, option)
        for priced, plan in filter(None, [(option, plain), packed_option(report, option, plain, target)]):
            plan = replace(plan, **{field: split})
            words = "; ".join([plan.describe()[0], f"each part: {option.options.describe()}",
                               *plan.describe()[1:]])
            name = (plan.describe()[0] + (f", each part {option.options.describe()}" if i else "")
                    + (", packed" if plan.packed else ""))
            found.append(SplitPick(name, plan, max(priced.predicted, shared) + beyond,
                                   words, layout, report))
    return found


def split_cost(parts: int, layout: SplitLayout | None) -> float:
    """Seconds a call split in `parts` as `layout` says costs beyond its slowest part: the
    hand-over (`split_overhead`: to helper processes where the layout runs in them, else
    threads) and, where the parts' sums are joined, a join's call each (`JOIN_SECONDS`)."""
    processes = layout is not None and in_processes(layout)
    joins = JOIN_SECONDS * len(layout.join_entries) if layout is not None else 0.0
    return joins + split_overhead(parts, processes)


def split_floor(whole_serial: float, parts: int, shared: float, layout: SplitLayout) -> float:
    """The least a split's plan can be predicted before its part is searched: the whole
    program's best prediction on one thread without column walks (`whole_serial`:
    `SearchReport.serial_floor`) shared evenly among the parts, or `shared`
    (`shared_seconds`), whichever is longer, and the split's own cost (`split_cost`). A part
    does at least its share of the whole's work, in kernels no larger than the whole's (and
    repeats what is not cut, and pays each dispatch's launch whole): on a 2-core Zen 4 VM the
    splits of nine bench models searched came out 1.01-2.38x their floor."""
    return max(whole_serial / parts, shared) + split_cost(parts, layout)


def trusted_split(target: Target, found: list[SplitPick], pick_predicted: float) -> SplitPick | None:
    """The split search="model" takes over the plan that would run otherwise (predicted
    `pick_predicted`: the whole program's pick, or IREE's default where the trust gate kept
    it), or None: the one predicted fastest once scaled by its kinds' trust factors (a batch's
    and a weights' split are measured apart), only where that still beats the pick. Scaling
    both sides by their factors favoured the split: the 256-1024-256 MLP at batch 32 split 319
    us predicted against the whole's 326 (both scaled 1.3), measured 482 against 330."""
    if not found:
        return None
    best = min(found, key=lambda pick: target.trust.pessimistic(pick.plan, pick.predicted))
    return best if target.trust.takes(best.plan, best.predicted, pick_predicted) else None
