"""One bench model or training step under IREE's compile of the import (twice: the control),
sft's search="none" and "model" (replayed from the tuning database where searched before), and
fixed plans (IREE's options on sft's lowering, the same with reductions reassociated, the
import through sft), each variant in processes of its own, taking turns, medians.

    .venv/bin/python tools/plans_side_by_side.py NAME [ROUNDS CALLS PROCESSES]   (5 10 3)

NAME: a model of `sft-bench speed` or `compile` (mlp, gpt2_small, ...), or a step of
`sft-bench train` (gpt2_block is the training step there, as here; jax_mlp_b8, ...).
"""
import os
import sys


def _plan(which: str):
    from sft.plan import Plan
    from sft.space.options import REASSOCIATE
    return {"as imported": Plan(as_imported=True), "IREE's options": Plan(),
            "reassociated": Plan(flags=(REASSOCIATE,))}.get(which)


def model_call(name: str, which: str):
    """A builder: the suite model's call; `which` "iree", a search mode or a fixed plan."""
    from sft.api import compile as sft_compile
    from sft.models import BENCH_SUITE, LARGE_SUITE
    from sft.tools.bench import _iree_default

    if which == "iree":  # IREE alone on torch-mlir's import, as sft-bench speed's column
        return _iree_default(name)
    case = {**BENCH_SUITE, **LARGE_SUITE}[name]
    model, inputs = case.build(), case.inputs()
    plan = _plan(which)
    compiled = sft_compile(model, inputs, plan=plan, search="none" if plan else which)
    arrays = [x.numpy() for x in inputs]
    return lambda: compiled(*arrays)


def torch_step(name: str, which: str):
    """A builder: the torch training step (`sft-bench train`'s)."""
    from sft.tools.bench_train import TORCH_TRAIN_SUITE, _iree_step
    from sft.train import compile_train_step
    from sft.values import to_numpy

    if which == "iree":
        return _iree_step(name)
    case = TORCH_TRAIN_SUITE[name]
    model, batch = case.build(), case.batch()
    plan = _plan(which)
    step = compile_train_step(model, case.loss, case.optimizer(model.parameters()), batch,
                              plan=plan, search="none" if plan else which)
    arrays = [to_numpy(x) for x in batch]
    return lambda: step(*arrays)


def jax_step(name: str, which: str):
    """A builder: the JAX training step (`sft-bench train`'s), its state passed back."""
    from sft.api import compile as sft_compile
    from sft.tools.bench_train_jax import JAX_TRAIN_SUITE, _iree_step, step_of

    if which == "iree":
        return _iree_step(name)
    step, (variables, opt_state, *batch) = step_of(JAX_TRAIN_SUITE[name])
    plan = _plan(which)
    compiled = sft_compile(step, (variables, opt_state, *batch), plan=plan,
                           search="none" if plan else which, donate_argnums=(0, 1))
    state = [variables, opt_state]

    def call():
        loss, state[0], state[1] = compiled(*state, *batch)
        return loss
    return call


def main(name: str, rounds: int, calls: int, processes: int) -> None:
    from sft.backend.timing import time_in_processes
    from sft.tools.bench_train import TORCH_TRAIN_SUITE
    from sft.tools.bench_train_jax import JAX_TRAIN_SUITE

    builder = (jax_step if name in JAX_TRAIN_SUITE else torch_step if name in TORCH_TRAIN_SUITE
               else model_call)
    builder(name, "model")  # searched (or replayed) here once: the workers replay it
    variants = ["iree", "iree again", "none", "model", "as imported", "IREE's options", "reassociated"]
    builders = {v: (builder, (name, "iree" if v == "iree again" else v)) for v in variants}
    times, errors = time_in_processes(builders, rounds, calls, timeout=900.0, processes=processes)
    for v in variants:
        seconds = times.get(v)
        ratio = f"{times['iree'] / seconds:.2f}x IREE" if seconds and times.get("iree") else ""
        print(f"{name:<16} {v:<16} {seconds * 1e3 if seconds else float('nan'):9.3f} ms  {ratio}"
              f"{'  failed: ' + str(errors[v])[:100] if v in errors else ''}")


if __name__ == "__main__":
    # the workers import this file's builders by module name
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, here)
    import plans_side_by_side
    numbers = [int(a) for a in sys.argv[2:5]]
    plans_side_by_side.main(sys.argv[1], *(numbers + [5, 10, 3][len(numbers):]))
