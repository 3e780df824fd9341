"""Data-parallel training with sft under torchrun: every rank compiles the same step
(`sft.compile_train_step(..., distributed=True)`), trains on its share of each batch, and the
gradients are averaged over the ranks through torch.distributed (gloo here).

    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/train_data_parallel.py \
        [--steps 60] [--batch 64] [--dims 256,1024,256] [--search none|model|verify]

Rank 0 prints what the step predicts (compute and communication per step, from the cost model
and the link measured on the group) beside what every rank measured (medians over the last
50 steps: the first ones warm caches up), and flags a rank whose compute is slower than its peers'.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import sft
from sft.models import MLP


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=64, help="the global batch, split over the ranks")
    p.add_argument("--dims", default="256,1024,256", help="the MLP's layer widths")
    p.add_argument("--search", default="none", choices=("none", "model", "verify"))
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dims = tuple(int(d) for d in args.dims.split(","))
    torch.manual_seed(0)
    model = MLP(dims)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    share = args.batch // world
    example = (torch.randn(share, dims[0]), torch.randint(0, dims[-1], (share,)))
    step = sft.compile_train_step(model, F.cross_entropy, opt, example, search=args.search,
                                  distributed=True)
    g = torch.Generator().manual_seed(rank)
    for i in range(args.steps):
        step(torch.randn(share, dims[0], generator=g), torch.randint(0, dims[-1], (share,), generator=g))
    times = step.rank_times()
    if rank == 0:
        report = step.search
        print(report.to_text().split("\ngradient program")[0])
        print(f"{'rank':>4} {'step ms':>9} {'compute ms':>11} {'communication ms':>17}  straggler")
        for t in times:
            print(f"{t['rank']:>4} {t['step_s'] * 1e3:9.3f} {t['compute_s'] * 1e3:11.3f} "
                  f"{t['communication_s'] * 1e3:17.3f}  {'yes' if t['straggler'] else 'no'}")
        compute = sorted(t["compute_s"] for t in times)[len(times) // 2]
        comm = sorted(t["communication_s"] for t in times)[len(times) // 2]
        ratio = lambda a, b: f"{a / b:.2f}x" if b else "-"  # noqa: E731
        print(f"measured / predicted: compute {ratio(compute, report.predicted_compute)}, "
              f"communication {ratio(comm, report.predicted_communication)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
