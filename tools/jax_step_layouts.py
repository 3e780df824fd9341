"""The bench's JAX MLP step (256-1024-256, cross-entropy, SGD momentum) with its weights
[in, out] (x @ W, as the suite writes it) against the same step with them [out, in] (x @ W.T,
as torch holds them): jax.jit, IREE's default on the same StableHLO import, and sft
search="model", all six timed in this one process, taking turns (7 rounds of 20 steps,
medians). An exploration of what a training step's layout is worth (docs/results.md, "A
split's parts priced packed; the Zen 4 host again"), not a benchmark: `sft-bench train` times
each variant in a process of its own.

    .venv/bin/python tools/jax_step_layouts.py [BATCH]   (default 128)
"""
import sys
import time

import jax
import numpy as np

import sft
from sft.backend import compile_module, load
from sft.importers.jax import import_jax
from sft.targets import get_target
from sft.tools import bench_train_jax as bj


def case(batch: int, transposed: bool) -> bj.JaxTrainCase:
    """The suite's MLP step at `batch`, its weights [out, in] where `transposed`."""
    def variables():
        params = bj._mlp_variables()["params"]
        if transposed:
            params = {k: np.ascontiguousarray(v.T) if v.ndim == 2 else v for k, v in params.items()}
        return {"params": params}

    def loss(variables, x, y):
        p = variables["params"]
        mm = (lambda a, w: a @ w.T) if transposed else (lambda a, w: a @ w)
        h = jax.nn.gelu(mm(x, p["w0"]) + p["b0"], approximate=False)
        return bj._ce(mm(h, p["w1"]) + p["b1"], y), {}

    return bj.JaxTrainCase("layout", loss, bj._sgd, variables, bj._classes((batch, 256), 256, (batch,)))


def steps(batch: int) -> dict:
    """name -> a callable that runs one step, its state kept where each variant keeps it."""
    calls = {}
    for transposed in (False, True):
        layout = "[out, in]" if transposed else "[in, out]"
        step, args = bj.step_of(case(batch, transposed))
        n = len(jax.tree_util.tree_leaves(args[:2]))

        jitted = jax.jit(step, donate_argnums=(0, 1))
        jstate, jbatch = list(jax.device_put(args[:2])), jax.device_put(args[2:])

        def jax_step(jitted=jitted, state=jstate, batch=jbatch):
            _, state[0], state[1] = jax.block_until_ready(jitted(*state, *batch))

        text, signature = import_jax(step, args)
        fn = load(compile_module(text, get_target("host")))
        leaves = [np.asarray(x) for x in signature.flatten(args)]
        istate, ibatch = [fn.upload(x) for x in leaves[:n]], leaves[n:]

        def iree_step(fn=fn, state=istate, batch=ibatch):
            loss, *state[:] = fn.call_on_device(*state, *batch)
            np.asarray(loss.to_host())

        compiled = sft.compile(step, args, search="model", donate_argnums=(0, 1))
        sstate = [args[0], args[1]]

        def sft_step(compiled=compiled, state=sstate, batch=args[2:]):
            _, state[0], state[1] = compiled(*state, *batch)

        calls.update({f"jax.jit {layout}": jax_step, f"IREE's default {layout}": iree_step,
                      f"sft model {layout}": sft_step})
    return calls


def main(batch: int, rounds: int = 7, calls: int = 20) -> None:
    variants = steps(batch)
    for call in variants.values():
        for _ in range(5):
            call()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, call in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                call()
            times[name].append((time.perf_counter() - start) / calls)
    for name, seconds in times.items():
        print(f"{name:28s} {np.median(seconds) * 1e3:.3f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 128)
