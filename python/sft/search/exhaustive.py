"""Exact search. Given the backend options and the fusion partition, a program's predicted time is
a sum of independent kernel terms, so the best plan is the best candidate of each kernel
(dynamic programming degenerates to per-kernel minima), taken under each option set in turn."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..backend.profile import Profile
from ..cost.model import (contraction_floor, fused_seconds, memory_bound, data_tiled_seconds,
                          other_dispatches, overheads, peak_seconds, transposed_seconds)
from .chains import plan_orders
from ..space.kernels import Kernel, in_layout, same_layout
from ..space.options import ModuleOptions
from ..targets import Target


@dataclass(frozen=True)
class KernelChoice:
    kernel: Kernel
    space: object                      # the target codegen's space (TileSpace on CPU)
    ranked: tuple[int, ...]            # candidate indices, best predicted first (0 always kept)
    predicted: tuple[float, ...]       # their predicted seconds
    # "f32", or the input type of a low-precision twin ("bf16", "f16": inputs rounded, f32
    # accumulation; its predictions include the casts)
    precision: str = "f32"

    @property
    def best(self) -> int:
        return self.ranked[0]

    def default_prediction(self) -> float:
        return float(self.predicted[self.ranked.index(0)])


@dataclass(frozen=True)
class OptionChoice:
    """The best plan under one set of backend options, and its predicted time."""

    options: ModuleOptions
    predicted: float
    kernels: tuple[KernelChoice, ...]  # ranked tiles per kernel (applied when options.keeps_tiles)


@dataclass
class SearchReport:
    ranked: list[OptionChoice] = field(default_factory=list)  # best predicted first
    scored: int = 0
    seconds: float = 0.0
    space_size_log10: float = 0.0      # log10 of the whole-program plans covered
    fallback: bool = False  # the chosen plan failed to compile; IREE's default was used
    measured: dict = field(default_factory=dict)  # what verify timed: name -> seconds or None
    chosen: str = ""                   # what was picked, in words
    replayed: bool = False             # the plan came from the tuning database, not a search
    chains: list = field(default_factory=list)  # OrderChoice per chain of contractions
    im2col: tuple[int, ...] = ()       # filter gradients as patch copies and matmuls, first
    split: tuple[int, ...] = ()        # sums over outer dims split, second
    orient: tuple[int, ...] = ()       # contractions computed in their readers' layout
    expand: tuple[int, ...] = ()       # contractions run over their expanded batch
    held: tuple[int, ...] = ()         # arguments held transposed (parameters read so)
    rewrites: dict = field(default_factory=dict)  # each rewrite searched: its `as_formed`
    # each rewrite searched, by name: (oriented op ids, expanded op ids, held arguments); not
    # stored (verify reads it right after the search)
    rewrite_ops: dict = field(default_factory=dict)
    # held weights the rewrite's matmuls could read packed: argument -> those matmuls' op ids
    # (`passes.hold_packed.packed_reads`; `candidates.packed_option` prices the plans that do)
    packed_reads: dict = field(default_factory=dict)
    default_predicted: float = math.inf  # IREE's default plan (its options, configs): predicted
    # the chosen plan's predicted seconds (IREE default's where the trust gate keeps it): what
    # an alternative to that plan (a batch split) must beat by the alternative's own trust
    pick_predicted: float = math.inf
    # the least predicted on one thread among every rewrite's option sets (held weights packed
    # where priced faster so), less each one's `walk_discount`: what a split's parts could at
    # best share (`split_search`)
    serial_floor: float = math.inf
    # The most the kernels' column walks (`model.walk_conflict_cycles`) add to any of this
    # rewrite's option sets on one thread: a split's part walks shorter strides than the whole
    # (a weight split halves N), and was priced 4% below its share of the whole with them.
    walk_discount: float = 0.0

    @property
    def as_formed(self) -> float:
        """The best predicted time under IREE's default dispatch formation: what rewrites are
        compared by (every rewrite is searched under it; a formation that packs operands, say,
        can hide what a rewrite changes, and may still fail to compile later)."""
        return min(o.predicted for o in self.ranked if not o.options.formation_flags)

    @property
    def orders(self) -> tuple:
        """The chains' chosen orders, as a Plan holds them."""
        return plan_orders(self.chains)

    def add_chains(self, chains: list, seconds: float) -> None:
        """Fold in the order search over the program's chains (it ran before the kernels were
        known)."""
        self.chains = list(chains)
        self.scored += sum(c.scored for c in chains)
        self.seconds += seconds
        self.space_size_log10 += sum(math.log10(max(c.orders, 1)) for c in chains)
        # IREE's default runs the chains as written: the orders' predicted saving is not its
        self.default_predicted += sum(c.written_predicted - c.predicted for c in chains)

    def add_alternatives(self, searched: dict) -> None:
        """Fold in the searches of the program as written and rewritten (`searched`: (oriented
        op ids, expanded op ids, held arguments) -> report; this report is one of them)."""
        self.orient, self.expand, self.held = next(e for e, r in searched.items() if r is self)
        self.default_predicted = searched[((), (), ())].default_predicted  # IREE's, as written
        self.rewrites = {_rewrite_name(*e): r.as_formed for e, r in searched.items()}
        self.rewrite_ops = {_rewrite_name(*e): e for e in searched}
        self.scored = sum(r.scored for r in searched.values())
        self.seconds = sum(r.seconds for r in searched.values())
        self.space_size_log10 = math.log10(sum(10 ** r.space_size_log10 for r in searched.values()))

    @property
    def choices(self) -> tuple[KernelChoice, ...]:
        return self.ranked[0].kernels if self.ranked else ()

    def summary(self) -> str:
        rate = f" ({self.scored / self.seconds:.2e}/s)" if self.scored and self.seconds else ""
        return (f"{len(self.choices)} kernels, space 10^{self.space_size_log10:.1f} plans, "
                f"{self.scored} candidates scored in {self.seconds * 1e3:.1f} ms{rate}")

    def to_dict(self) -> dict:
        return {
            "summary": self.summary(), "chosen": self.chosen, "fallback": self.fallback,
            "replayed": self.replayed,
            "space_size_log10": self.space_size_log10, "scored": self.scored,
            "search_seconds": self.seconds,
            "options": [{"options": o.options.describe(), "predicted_s": o.predicted}
                        for o in self.ranked],
            "kernels": [{"op": c.kernel.op_id, "domain": c.kernel.domain, "roles": c.kernel.roles,
                         "candidates": len(c.space), "best": _config_data(c.space.config(c.best)),
                         "predicted_s": _finite(c.predicted[0]),
                         "default_predicted_s": _finite(c.default_prediction()),
                         "precision": c.precision}
                        for c in self.choices],
            "measured_s": self.measured,
            "chains": [c.to_dict() for c in self.chains],
            "orient": list(self.orient), "expand": list(self.expand), "held": list(self.held),
            "rewrites_predicted_s": self.rewrites,
            "default_predicted_s": _finite(self.default_predicted),
        }

    def to_text(self) -> str:
        lines = [self.summary()]
        for o in self.ranked:
            lines.append(f"  options {o.options.describe():<32} predicted {o.predicted * 1e3:8.4f} ms")
        for c in self.chains:
            lines.append(f"  chain at op {c.chain.op_id}: order {c.order}, predicted "
                         f"{c.predicted * 1e6:.1f} us vs {c.written_predicted * 1e6:.1f} us as "
                         f"written {c.chain.written} ({c.orders} orders, {c.pruned} splits pruned)")
        if len(self.rewrites) > 1:
            shown = ", ".join(f"{name} {t * 1e3:.4f} ms" for name, t in self.rewrites.items())
            lines.append(f"  rewrites: {shown}; taken: {_rewrite_name(self.orient, self.expand, self.held)}")
        for c in self.choices:
            # a twin never runs IREE's own config (`rank_tiles`): there is no default to compare
            against = (f"vs IREE default {c.default_prediction() * 1e6:.1f} us" if c.precision == "f32"
                       else f"{c.precision} inputs, f32 accumulation, casts included")
            lines.append(f"  kernel op {c.kernel.op_id} {'x'.join(map(str, c.kernel.domain))} "
                         f"({''.join(c.kernel.roles)}): candidate {c.best} of {len(c.space)}, "
                         f"predicted {c.predicted[0] * 1e6:.1f} us {against}")
        for name, seconds in self.measured.items():
            shown = "failed" if seconds is None else f"{seconds * 1e3:.4f} ms"
            lines.append(f"  measured {name:<40} {shown}")
        if self.chosen:
            replayed = " (replayed from the tuning database)" if self.replayed else ""
            lines.append(f"  chosen: {self.chosen}{replayed}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


def _config_data(config) -> dict | None:
    """A kernel config as the report's JSON holds it (None: IREE's own)."""
    return None if config is None else config.to_dict()


def _finite(seconds: float) -> float | None:
    """None for a prediction that is not a number of seconds (a twin's IREE default is never
    run: infinite), so that the report is standard JSON (null, not `inf`)."""
    return seconds if math.isfinite(seconds) else None


def rank_tiles(kernel: Kernel, space, target: Target, cores: int, default: tuple[int, ...],
               top_k: int, precision: str = "f32", casts: float = 0.0,
               iree_only: bool = False) -> KernelChoice:
    """The kernel's top-k candidates by the target's model, IREE's default (row 0) among them
    (`iree_only`: row 0 alone, at its prediction).

    For a low-precision twin (`precision` its input type) every candidate also pays its casts
    (`casts` seconds), and row 0 is never taken: IREE's own config for the twin is unknown
    before IREE has seen the twin (the profile is of the f32 program), so the twin runs only
    with a config of its own."""
    times = target.codegen.predict(kernel, space.candidates, target.desc, cores, default) + casts
    if iree_only:
        return KernelChoice(kernel, space, (0,), (float(times[0]),), precision)
    if precision != "f32":
        times[0] = np.inf
    order = np.argsort(times, kind="stable")
    keep = [int(i) for i in order[:top_k]]
    if 0 not in keep:
        keep.append(0)  # IREE's default always stays in the running
    return KernelChoice(kernel, space, tuple(keep), tuple(float(times[i]) for i in keep), precision)


def walk_discount(choice: KernelChoice, target: Target, default: tuple[int, ...]) -> float:
    """How much less the kernel's best and IREE-default predictions on one thread would be
    without the column-walk term (the larger): any option set's total falls by no more."""
    cpu = target.desc.cpu
    if not cpu.walk_conflict_cycles or choice.kernel.k_stride(0) == choice.kernel.k_stride(1) == 1:
        return 0.0
    free = replace(target.desc, cpu=replace(cpu, walk_conflict_cycles=0.0))
    times = target.codegen.predict(choice.kernel, choice.space.candidates, free, 1, default)
    return max(choice.predicted[0] - float(times.min()), choice.default_prediction() - float(times[0]), 0.0)


def low_precision_twin(kernel: Kernel, target: Target, dtype: str):
    """(twin kernel, its space) for the kernel's low-precision twin (`dtype` inputs, f32
    accumulation), or None where the target's codegen offers none (`Codegen.low_precision`,
    optional: the host's has none) or the twin's space has no config of its own."""
    offer = getattr(target.codegen, "low_precision", None)
    twin = offer(kernel, dtype) if offer is not None else None
    if twin is None:
        return None
    space = target.codegen.space(twin)
    return (twin, space) if len(space) > 1 else None  # row 0 alone: `rank_tiles` never takes it


def _rewrite_name(orient: tuple, expand: tuple, held: tuple = ()) -> str:
    """A rewrite in words: "as written", "oriented [3]", "expanded [7]", "held [0, 2]" or
    several."""
    parts = [f"{word} {list(ops)}" for word, ops in (("oriented", orient), ("expanded", expand),
                                                     ("held", held)) if ops]
    return " + ".join(parts) or "as written"


def cast_seconds(inputs: tuple[tuple[int, bool], ...], target: Target) -> float:
    """The casts a twin needs (passes/low_precision.py `castable`: per input its element count
    and whether its cast is a dispatch of its own), memory-bound on the target's DRAM
    bandwidth: each element read as f32 and written as 2 bytes (the twin's own reads of 2 bytes
    are in its kernel's prediction), and a dispatch's overhead for each cast that has one."""
    return sum(elements * (4 + 2) / target.desc.dram_bandwidth
               + (target.desc.dispatch_overhead if own else 0.0) for elements, own in inputs)


def as_compiled(kernels: list[Kernel], profile: Profile, target: Target) -> tuple[list[Kernel], list[tuple]]:
    """The kernels in the operand layouts IREE compiles them in, and IREE's default candidate
    for each, both read from its dispatches. A kernel with no dispatch of its loop extents, or
    whose summed loops are not innermost, is
    restructured by IREE (loops permuted, transposes folded in): a config sft imposed would not
    describe what IREE compiles, so it keeps IREE's own and counts among the other dispatches."""
    if target.codegen is None:  # IREE's own configs everywhere
        return [], []
    seen = [(k, _dispatch_of(k, profile)) for k in kernels if k.reductions_innermost]
    seen = [(in_layout(k, d.maps), d) for k, d in seen if d is not None]
    return [k for k, _ in seen], [target.codegen.default(k, d) for k, d in seen]


def _dispatch_of(kernel: Kernel, profile: Profile):
    """IREE's dispatch of `kernel`: one of its loop extents, the one reading its operands as the
    kernel does where several have those extents (an MLP's forward x @ W1 and backward
    dY @ W2^T are both 32x1024x256, one with B across its rows), else the first."""
    found = profile.contractions(kernel.domain)
    return next((d for d in found if same_layout(kernel, d.maps)), found[0] if found else None)


def search_program(kernels: list[Kernel], profiles: dict[tuple[str, ...], Profile], target: Target,
                   options: list[ModuleOptions], top_k: int = 5, precision: str = "f32",
                   castable: dict[int, tuple[tuple[int, bool], ...]] | None = None) -> SearchReport:
    """Rank every option set by the predicted time of its best plan. `profiles` maps the
    options' dispatch-forming flags (`ModuleOptions.formation_flags`) to IREE's view of the
    program under them.

    With `precision` "bf16" or "f16" each kernel in `castable` (op id -> the inputs to cast,
    passes/low_precision.py `castable`) is also scored as its low-precision
    twin, casts included, and takes the faster of the two wherever tile configs apply."""
    report = SearchReport()
    start = time.perf_counter()
    # where the model's timings mean nothing (Target.model_times), IREE's configs everywhere
    kernels, defaults = as_compiled(kernels, profiles[()], target) if target.searched_codegen else ([], [])
    spaces = [target.codegen.space(k) for k in kernels]
    # The model prices no tile's walk across the rows of tensors fused into its dispatch
    # transposed (a JAX training step's update of a weight held the other way round): its
    # tiles ran those four dispatches of a JAX GPT-2 step 1.1-1.7x slower than IREE's (one
    # thread, 661 against 392 us the largest), and verify times kernels alone, without them.
    # They keep IREE's config.
    fixed = [_dispatch_of(k, profiles[()]).transposed_bytes > 0 for k in kernels]
    castable = castable or {}
    twins = [low_precision_twin(k, target, precision)
             if precision != "f32" and k.op_id in castable and not f else None
             for k, f in zip(kernels, fixed)]
    desc = target.desc
    by_cores: dict[int, list[KernelChoice]] = {}
    mixed: dict[int, list[KernelChoice]] = {}  # per kernel the faster of f32 and its twin
    for cores in sorted({1 if o.serial else desc.cores for o in options}):
        by_cores[cores] = [rank_tiles(k, s, target, cores, d, top_k, iree_only=f)
                           for k, s, d, f in zip(kernels, spaces, defaults, fixed)]
        report.scored += sum(len(s) for s in spaces)
        if cores == 1:
            report.walk_discount = sum(walk_discount(c, target, d) for c, d in zip(by_cores[1], defaults))
        mixed[cores] = list(by_cores[cores])
        for i, (k, twin, d) in enumerate(zip(kernels, twins, defaults)):
            if twin is None:
                continue
            twin_kernel, twin_space = twin
            low = rank_tiles(twin_kernel, twin_space, target, cores, d, top_k, precision,
                             cast_seconds(castable[k.op_id], target))
            report.scored += len(twin_space)
            if low.predicted[0] < mixed[cores][i].predicted[0]:
                mixed[cores][i] = low
    rests: dict[tuple, float] = {}
    # per kernel, its dispatch's bytes streamed once or its FMAs at the core's rate
    floors: dict[tuple, list[float]] = {}
    fused: dict[tuple, list[float]] = {}  # per kernel, what the ops fused into its dispatch add
    for o in options:
        cores = 1 if o.serial else desc.cores
        profile = profiles[o.formation_flags]
        # A twin needs a config of its own: only where tile configs apply (data tiling and
        # micro-kernels replace the kernel's codegen).
        choices = mixed[cores] if o.keeps_tiles else by_cores[cores]
        key = (o.formation_flags, cores)
        if key not in rests:  # the same for every option set that forms the same dispatches
            rests[key] = (sum(memory_bound(d, desc, cores) for d in other_dispatches(profile, kernels))
                          + transposed_seconds(profile, desc, cores))
            floors[key] = [max(contraction_floor(_dispatch_of(k, profile), desc, cores),
                               peak_seconds(k, desc, cores)) for k in kernels]
            fused[key] = [fused_seconds(_dispatch_of(k, profile), k, desc, cores) for k in kernels]
        rest = rests[key]
        if o.keeps_tiles:
            kernel_time = sum(max(c.predicted[0] + x, f) for c, f, x in zip(choices, floors[key], fused[key]))
        else:
            kernel_time = sum(max(data_tiled_seconds(k, o, desc, cores, c.default_prediction()) + x, f)
                              for k, c, f, x in zip(kernels, choices, floors[key], fused[key]))
        # the inline driver (and a GPU) pays every dispatch; IREE's CPU executor, the ones it splits
        split = not o.serial and target.driver == "local-task"
        count = profile.split_count if split else profile.dispatch_count
        total = kernel_time + rest + overheads(o, count, desc)
        report.ranked.append(OptionChoice(o, total, tuple(choices)))
        if o.is_default:  # what the trust gate holds every pick against
            report.default_predicted = (sum(max(c.default_prediction() + x, f) for c, f, x
                                            in zip(by_cores[cores], floors[key], fused[key]))
                                        + rest + overheads(o, count, desc))
    report.ranked.sort(key=lambda o: o.predicted)
    tiled = sum(o.keeps_tiles for o in options)
    report.space_size_log10 = math.log10(
        tiled * math.prod(len(s) + (len(t[1]) if t else 0) for s, t in zip(spaces, twins))
        + len(options) - tiled)
    report.seconds = time.perf_counter() - start
    return report
