"""Train a small GPT-2-style language model with a step compiled by sft, beside the same
training in PyTorch eager, on synthetic data, and plot both loss curves.

    .venv/bin/python examples/train_gpt2.py [--steps 300] [--plot loss.png]

The data is a fixed random "grammar": each token's successor is drawn from a few tokens that
depend on it, so the model has something to learn and the loss falls well below log(vocab).
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch
import torch.nn.functional as F

import sft
from sft.models import GPT2


def batches(vocab: int, batch: int, length: int, steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=g)
    for _ in range(steps):
        tokens = [torch.randint(0, vocab, (batch,), generator=g)]
        for _ in range(length):
            choice = torch.randint(0, 4, (batch,), generator=g)
            tokens.append(successors[tokens[-1], choice])
        seq = torch.stack(tokens, 1)
        yield seq[:, :-1], seq[:, 1:]


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--plot", default="", help="write the loss curves to this PNG (matplotlib)")
    args = p.parse_args()
    vocab, batch, length = 256, 8, 32
    torch.manual_seed(0)
    model = GPT2(vocab=vocab, dim=64, heads=4, max_len=length, layers=2)
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=3e-3)
    data = list(batches(vocab, batch, length, args.steps))
    start = time.perf_counter()
    step = sft.compile_train_step(model, lm_loss, opt, data[0], search="model")
    print(f"compiled in {time.perf_counter() - start:.1f} s, {step.dispatch_count} dispatches")
    losses, ref_losses = [], []
    sft_s = eager_s = 0.0
    for x, y in data:
        t = time.perf_counter()
        losses.append(float(step(x, y)))
        sft_s += time.perf_counter() - t
        t = time.perf_counter()
        loss = lm_loss(reference(x), y)
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        eager_s += time.perf_counter() - t
        ref_losses.append(loss.item())
    step.sync()
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} (log(vocab) = {math.log(vocab):.3f}); eager "
          f"{ref_losses[0]:.3f} -> {ref_losses[-1]:.3f}; largest loss difference "
          f"{max(abs(a - b) for a, b in zip(losses, ref_losses)):.2e}")
    print(f"time in steps: sft {sft_s:.2f} s, eager {eager_s:.2f} s (one run, this machine: a "
          "rough figure, `sft-bench train` measures properly)")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(losses, label="sft.compile_train_step")
        ax.plot(ref_losses, "--", label="PyTorch eager")
        ax.set(xlabel="step", ylabel="cross-entropy", title="GPT-2-style model, synthetic data")
        ax.legend()
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
