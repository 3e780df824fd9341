"""One rank of a data-parallel training run, as a user's torchrun script would be: the tests of
`test_distributed_train.py` launch it on 2 local ranks (gloo) and compare what each rank saved
with one process training on the ranks' batches concatenated.

    python worker.py CASE STEPS OUT_DIR [--die-after N | --dynamo]

Each rank trains on its share (`chunk(world)[rank]`) of the same seeded global batches and
saves {"state", "optimizer", "losses", "rank_times", "report"} to OUT_DIR/rank{r}.pt. With
`--die-after N`, rank 1 exits abruptly after N steps (a crashed peer). With `--dynamo`, the
model is wrapped in DistributedDataParallel and compiled by `torch.compile(backend="sft")`, the
optimizer eager (DDP's own all-reduce).
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import sft
from sft.errors import SftError
from sft.models import MLP, GPT2Block


def _gpt_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# name -> (build, optimizer, loss, global example batch, classes, compile_train_step options)
CASES = {
    "mlp": (lambda: MLP((16, 32, 4)),
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            F.cross_entropy, (torch.randn(8, 16), torch.randint(0, 4, (8,))), 4, {}),
    "gpt2_block": (lambda: GPT2Block(vocab=64, dim=32, heads=2, max_len=16),
                   # eps 1e-4: the key projection's bias has a zero gradient in exact arithmetic
                   # (softmax is shift-invariant), so its gradient is rounding noise (~1e-10),
                   # which a smaller eps turns into steps of ~lr x 1e-4 that differ with the
                   # order of the ranks' sum; the real gradients here are 1e-3 and larger
                   lambda ps: torch.optim.AdamW(ps, lr=1e-2, eps=1e-4, weight_decay=0.1),
                   _gpt_loss, (torch.randint(0, 64, (4, 8)), torch.randint(0, 64, (4, 8))), 64,
                   {"max_grad_norm": 1.0}),
}


def batches(example, classes, n, seed=1):
    """`n` global batches shaped like `example`."""
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(b.shape, generator=g) if b.is_floating_point()
                  else torch.randint(0, classes, b.shape, generator=g) for b in example)
            for _ in range(n)]


def main(argv):
    case, steps, out = argv[0], int(argv[1]), argv[2]
    die_after = int(argv[4]) if len(argv) > 4 and argv[3] == "--die-after" else None
    if argv[3:] == ["--dynamo"]:
        return ddp_with_dynamo(case, steps, out)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    build, make_opt, loss_fn, example, classes, options = CASES[case]
    torch.manual_seed(rank)  # different on every rank: the step must start from rank 0's
    model = build()
    opt = make_opt(model.parameters())
    share = tuple(t.chunk(world)[rank] for t in example)
    step = sft.compile_train_step(model, loss_fn, opt, share, distributed=True, **options)
    losses = []
    for i, batch in enumerate(batches(example, classes, steps)):
        if die_after is not None and rank == 1 and i == die_after:
            os._exit(3)  # a crashed rank: no clean-up, no goodbye to the group
        losses.append(float(step(*(t.chunk(world)[rank] for t in batch))))
    times = step.rank_times()
    step.save(os.path.join(out, f"checkpoint{rank}.pt"))  # syncs into model and opt
    # a resumed step (the saved plans, no search) starts where this one is
    fresh = build()
    resumed = sft.load_train_step(os.path.join(out, f"checkpoint{rank}.pt"), fresh,
                                  make_opt(fresh.parameters()), loss_fn)
    same = all(torch.equal(v, resumed.state_dict()[k]) for k, v in step.state_dict().items())
    torch.save({"state": model.state_dict(), "optimizer": step.optimizer_state(),
                "losses": losses, "rank_times": times, "report": step.search.to_text(),
                "resumed_same": same, "resumed_plans": (resumed.plan == step.plan)},
               os.path.join(out, f"rank{rank}.pt"))
    _finish()


def _finish():
    """Leave the group together and end the rank without the interpreter's teardown: a rank
    that tears gloo down while its peer is still connected can abort there ("terminate called
    without an active exception": a pair thread still joinable, pytorch/pytorch#28126 and
    #190489; once under CI's load, after this rank had saved its results)."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def eager_steps(forward, model, opt, loss_fn, options, data) -> list[float]:
    """PyTorch's own training loop over `data` (clipping where `options` ask); the losses."""
    losses = []
    for *inputs, target in data:
        loss = loss_fn(forward(*inputs), target)
        loss.backward()
        if "max_grad_norm" in options:
            torch.nn.utils.clip_grad_norm_(model.parameters(), options["max_grad_norm"])
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def ddp_with_dynamo(case, steps, out):
    """The torch.compile path: the user's DistributedDataParallel, sft as Dynamo's backend."""
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    build, make_opt, loss_fn, example, classes, options = CASES[case]
    torch.manual_seed(rank)
    model = DistributedDataParallel(build())  # broadcasts rank 0's parameters
    opt = make_opt(model.parameters())
    compiled = torch.compile(model, backend="sft")
    shares = [tuple(t.chunk(world)[rank] for t in b) for b in batches(example, classes, steps)]
    losses = eager_steps(compiled, model, opt, loss_fn, options, shares)
    torch.save({"state": model.module.state_dict(), "losses": losses},
               os.path.join(out, f"rank{rank}.pt"))
    _finish()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SftError as err:
        print(f"sft: {err}", file=sys.stderr, flush=True)
        # no interpreter teardown: with its peer gone, gloo's threads can abort it there
        # ("terminate called without an active exception", twice under CI's load)
        os._exit(1)
