"""Side by side, one process per variant (7 rounds of 20 calls, medians): training steps of
`sft-bench train`'s suite with their state written into output storage (`Target.state_in_place`)
against fresh results (the default).

    .venv/bin/python tools/bench_state_in_place.py mlp_b32 mlp_b128 jax_mlp_b32 gpt2_block
"""
import dataclasses
import sys


def _target(in_place):
    from sft.targets import get_target

    return dataclasses.replace(get_target("host"), state_in_place=in_place)


def torch_step(name, in_place):
    """A compiled torch training step of the suite (a worker's builder)."""
    from sft.tools.bench_train import TRAIN_SUITE
    from sft.train import compile_train_step
    from sft.values import to_numpy

    case = TRAIN_SUITE[name]
    model, batch = case.build(), case.batch()
    step = compile_train_step(model, case.loss, case.optimizer(model.parameters()), batch,
                              target=_target(in_place))
    arrays = [to_numpy(x) for x in batch]
    return lambda: step(*arrays)


def jax_step(name, in_place):
    """A compiled JAX training step of the suite, its state donated (a worker's builder)."""
    import sft
    from sft.tools.bench_train_jax import JAX_TRAIN_SUITE, step_of

    fn, args = step_of(JAX_TRAIN_SUITE[name])
    compiled = sft.compile(fn, args, donate_argnums=(0, 1), target=_target(in_place))
    state = list(args)

    def call():
        loss, state[0], state[1] = compiled(*state)
        return loss
    return call


if __name__ == "__main__":
    from pathlib import Path

    # the builders run in worker processes, which import them from this file's folder
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_state_in_place as sb
    from sft.backend.timing import time_in_processes

    for name in sys.argv[1:]:
        build = sb.jax_step if name.startswith("jax_") else sb.torch_step
        times, errors = time_in_processes({"fresh": (build, (name, False)),
                                           "storage": (build, (name, True))}, rounds=7, calls=20)
        ms = {k: round(v * 1e3, 3) if v else v for k, v in times.items()}
        ratio = f"fresh / storage {times['fresh'] / times['storage']:.3f}x" if all(times.values()) else ""
        print(name, ms, errors or "", ratio, flush=True)
