"""`sft-calibrate`: measure the host's numbers for the cost model with short IREE
microbenchmarks, and store them where the `host` target (`targets/host.py`) finds them.

Each number comes from a pair of programs timed side by side (interleaved processes, medians),
so that what is measured is a difference or a ratio, not one noisy absolute time.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from .backend import compile_module, profile
from .backend.bench import Variant, benchmark
from .cost.model import default_candidate, predict
from .targets.host import calibration_file, detected_description
from .measure import kernel_inputs, kernel_program
from .space.kernels import Kernel
from .space.options import DATA_TILING, SERIAL_DRIVER, UKERNELS

# The layout of every nn.Linear: weights stored [n, k], contiguous along k.
MATMUL = Kernel(0, (256, 256, 256), ("m", "n", "k"), 4,
                ("affine_map<(d0, d1, d2) -> (d0, d2)>", "affine_map<(d0, d1, d2) -> (d1, d2)>",
                 "affine_map<(d0, d1, d2) -> (d0, d1)>"))


def chain_program(regions: int, n: int) -> str:
    """`regions` dependent elementwise ops on a vector of n f32, each forced into a dispatch of
    its own by a flow.dispatch.region (IREE keeps such regions)."""
    ty = f"tensor<{n}xf32>"
    lines = [f"func.func @main(%x0: {ty}) -> {ty} {{"]
    for i in range(regions):
        lines += [
            f"  %x{i + 1} = flow.dispatch.region -> ({ty}) {{",
            f"    %e = tensor.empty() : {ty}",
            f"    %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],"
            f" iterator_types = [\"parallel\"]}} ins(%x{i} : {ty}) outs(%e : {ty}) {{",
            "    ^bb0(%a: f32, %b: f32):",
            "      %s = arith.addf %a, %a : f32",
            "      linalg.yield %s : f32",
            f"    }} -> {ty}",
            f"    flow.return %r : {ty}",
            "  }"]
    lines += [f"  return %x{regions} : {ty}", "}"]
    return "\n".join(lines) + "\n"


def measure_host(rounds: int = 7, progress=None) -> dict:
    """The measured fields of the host's TargetDesc."""
    host = detected_description()
    variants = {}
    for regions in (1, 17):
        art = compile_module(chain_program(regions, 256))
        variants[f"chain{regions}/task"] = Variant(art)
        variants[f"chain{regions}/sync"] = Variant(art, SERIAL_DRIVER)
    t = benchmark(variants, ["256xf32"], rounds=rounds, progress=progress)

    def copy_seconds(n: int) -> float:
        variant = Variant(compile_module(chain_program(1, n)), SERIAL_DRIVER)
        return benchmark({"copy": variant}, [f"{n}xf32"], rounds=rounds, progress=progress)["copy"]

    big, small = 4 << 20, 64 << 10  # 16 MiB per buffer: beyond every cache; 256 KiB: in L2
    stream, l2 = copy_seconds(big), copy_seconds(small)

    matmul = {}
    for name, flags in (("default", ()), ("dt", (DATA_TILING,)), ("uk", (UKERNELS,)),
                        ("dt+uk", (DATA_TILING, UKERNELS))):
        art = compile_module(kernel_program(MATMUL, None), "host", flags)
        matmul[f"{name}/sync"] = Variant(art, SERIAL_DRIVER)
        if name == "default":
            matmul["default/task"] = Variant(art)
    m = benchmark(matmul, kernel_inputs(MATMUL), rounds=rounds, progress=progress)

    serial_dispatch = max((t["chain17/sync"] - t["chain1/sync"]) / 16, 0.0)
    dispatch = max((t["chain17/task"] - t["chain1/task"]) / 16, 0.0)
    # One core's achievable FLOP rate scaled so that the model predicts IREE's default matmul
    # as measured: the model's shape terms stay, its scale comes from this machine.
    default = default_candidate(MATMUL, profile(kernel_program(MATMUL, None)).dispatches[0])
    predicted = predict(MATMUL, np.zeros((1, 5), int), host, cores=1, default=default)[0]
    work = m["default/sync"] - t["chain1/sync"]
    # The executor's speed-up on the matmul's work alone: each driver's own call cost (the
    # one-dispatch chain) comes off its time first, or the wake-up would read as no speed-up.
    parallel_work = max(m["default/task"] - t["chain1/task"], 1e-9)
    return {
        "invoke_overhead": max(t["chain1/task"] - dispatch, 0.0),
        "dispatch_overhead": dispatch,
        "serial_invoke_overhead": max(t["chain1/sync"] - serial_dispatch, 0.0),
        "serial_dispatch_overhead": serial_dispatch,
        "dram_bandwidth": 2 * big * 4 / stream,
        "l2_bandwidth": 2 * small * 4 / max(l2 - t["chain1/sync"], 1e-9),
        "peak_flops_f32": host.peak_flops_f32 * predicted / work,
        "parallel_efficiency": min(max(work / parallel_work - 1.0, 0.0), 1.0) / max(host.cores - 1, 1),
        "data_tiling_speedup": m["default/sync"] / m["dt/sync"],
        "ukernel_speedup": m["default/sync"] / m["uk/sync"],
        "data_tiling_ukernel_speedup": m["default/sync"] / m["dt+uk/sync"],
    }


def calibrate(rounds: int = 7, progress=None) -> dict:
    """Measure and store the host's numbers; returns them."""
    measured = measure_host(rounds, progress)
    dataclasses.replace(detected_description(), **measured)  # a field the description lacks fails here, not later
    calibration_file().write_text(json.dumps(measured, indent=2, sort_keys=True))
    return measured
