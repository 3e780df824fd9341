"""Plans from a search's result: the one constructor of a searched `Plan` (`plan_of`), and the
whole-program candidates that verify times (`program_candidates`; gpu-check prepares the same
list for a GPU machine)."""

from __future__ import annotations

from dataclasses import replace

from ..cost.model import peak_seconds
from ..passes.hold_packed import block_of
from ..plan import Plan
from ..space.options import ModuleOptions

TOP_OPTIONS = 4  # option sets verify times beyond the best of each kind
# verify times the graph rewrites predicted within this of the pick's (mha on the Xeon VM: its
# weights held predicted 1.106x the batch expansion the model took, and measured the fastest,
# 0.123 ms against 0.146 for the program as written)
REWRITE_SPREAD = 1.15


def plan_of(report, options: ModuleOptions, tiles: tuple = (), low_precision: tuple = ()) -> Plan:
    """The plan of one searched option set: the report's graph rewrites (orientation, batch
    expansion and chain orders), the options' iree-compile flags and driver, and `tiles` and
    `low_precision` where the options keep sft's kernel configs (data tiling and micro-kernels
    replace them)."""
    keeps = options.keeps_tiles
    return Plan(im2col=report.im2col, split=report.split, held=report.held, orient=report.orient,
                expand=report.expand, orders=report.orders,
                tiles=tuple(tiles) if keeps else (), flags=options.flags, driver=options.driver,
                low_precision=tuple(low_precision) if keeps else ())


def packed_option(report, option, plan: Plan, target):
    """(the option with its predicted seconds, `plan` with the weights it holds packed) where
    the model predicts packing them faster, else None. A matmul reading a packed weight is
    priced at its IREE-default prediction over the host's measured speed-up of a packed
    product (`TargetDesc.packed_speedup`: `sft-calibrate` times one whole, packs included, at
    IREE's code against the weight held [K, N]); never calibrated (1.0), nothing is packed."""
    speedup = target.desc.packed_speedup
    if speedup <= 1.0 or not report.packed_reads or not option.options.keeps_tiles or plan.packed:
        return None
    ops = {op for ids in report.packed_reads.values() for op in ids}
    cores = 1 if option.options.serial else target.desc.cores
    saving = sum(c.predicted[0] - max(c.default_prediction() / speedup,
                                      peak_seconds(c.kernel, target.desc, cores))
                 for c in option.kernels if c.kernel.op_id in ops and c.precision == "f32")
    if saving <= 0:
        return None
    m0, n0 = block_of(target.desc)
    return (replace(option, predicted=option.predicted - saving),
            replace(plan, packed=tuple((a, m0, n0) for a in sorted(report.packed_reads))))


def program_candidates(report, tiles: tuple = (), top_options: int = TOP_OPTIONS) -> dict[str, Plan]:
    """name -> plan of each whole program verify times: IREE's default through sft's raise and
    lower, IREE alone on the front end's import (whatever sft's own lowering costs, the user is
    never given less than IREE alone), the `top_options` best predicted option sets with
    `tiles`, plus the best of each driver, fusion, packing and convolution strategy however the
    model ranks them (the executor's cost on a shared machine, IREE's convolution code and what
    its aggressive fusion or data tiling cannot compile are what the model misjudges), and,
    where a graph rewrite was chosen, the program as written (the rewrites measured alone), and
    each graph rewrite predicted within `REWRITE_SPREAD` of the pick's, these with IREE's tiles
    under the best options of each driver.
    Identical plans once, under the first name."""
    candidates = {"iree-default": Plan(), "iree-import": Plan(as_imported=True)}
    # data tiling among the kinds: where iree-compile cannot finish a program's packed code
    # (a JAX MLP step: "exceeded stack allocation limit"), the top sets may all pack
    kind = lambda o: (o.options.driver, o.options.im2col, o.options.fusion,  # noqa: E731
                      o.options.data_tiling)
    options = list(report.ranked[:top_options])
    for option in report.ranked[top_options:]:
        if kind(option) not in {kind(o) for o in options}:
            options.append(option)
    for option in options:
        candidates[option.options.describe()] = plan_of(report, option.options, tiles)
    # The program as written and the graph rewrites the model ranked close to its pick, each
    # with IREE's tiles under the best options of each driver: a JAX GPT-2 step's weight
    # gradients computed in their update's layout (oriented) were priced 2% slower and ran 10%
    # faster (the transposed update's cost is one number measured on two other programs:
    # `TargetDesc.transposed_cost`), and the parallel executor the model ranked second ran that
    # step fastest (IREE's default 1.51 ms, oriented on one thread 1.79).
    drivers = {}
    for option in report.ranked:
        drivers.setdefault(option.options.driver, option.options)
    rewritten = report.orders or report.expand or report.orient or report.held
    for o in drivers.values():
        first = dict(im2col=report.im2col, split=report.split, flags=o.flags, driver=o.driver)
        if rewritten:
            candidates[f"{o.describe()} as written"] = Plan(**first)
        for name, (orient, expand, held) in report.rewrite_ops.items():  # (searched: ranked has a best)
            if report.rewrites[name] <= report.as_formed * REWRITE_SPREAD:
                candidates[f"{o.describe()} {name}"] = Plan(**first, orient=orient, expand=expand,
                                                            held=held)
    unique: dict[str, Plan] = {}
    for name, plan in candidates.items():
        if plan not in unique.values():
            unique[name] = plan
    return unique
