"""Fine-tune Hugging Face's GPT-2 (a small config, random weights: nothing is downloaded) as
people do, three ways side by side, and plot the loss curves:

- PyTorch eager;
- `torch.compile(model, backend="sft")`: the same loop, Dynamo's graphs compiled by sft;
- `sft.compile_train_step`: forward, backward, clipping and AdamW as one program.

The loop: GPT-2's defaults (sdpa attention, the LM head tied to the token embedding), padded
batches with an attention mask (padding left out of the loss), dropout `--dropout` on
embeddings, residuals and attention weights, AdamW with no weight decay on biases and
LayerNorms, a linear warm-up then linear decay of the learning rate, gradients clipped to
norm 1.0, and 2 micro-batches accumulated per update.

    .venv/bin/python examples/finetune_gpt2.py [--steps 200] [--dropout 0.0] [--plot loss.png]
    .venv/bin/python examples/finetune_gpt2.py --time [--steps 60]   # step time per entry point

With dropout 0 the three curves agree to rounding; with dropout the compiled step draws its
masks from its own generator (seeded by torch's), so its curve is compared with the spread of
eager runs under several seeds.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
import warnings

import torch
import torch.nn.functional as F

import sft

VOCAB, LENGTH, BATCH, ACCUMULATION = 256, 32, 8, 2


def batches(steps: int, seed: int = 0):
    """Synthetic text (each token's successor drawn from 4 that depend on it), some rows
    padded: (input ids, attention mask, labels with -100 on the padding)."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
    for _ in range(steps):
        tokens = [torch.randint(0, VOCAB, (BATCH,), generator=g)]
        for _ in range(LENGTH - 1):
            tokens.append(successors[tokens[-1], torch.randint(0, 4, (BATCH,), generator=g)])
        ids = torch.stack(tokens, 1)
        lengths = torch.randint(LENGTH // 2, LENGTH + 1, (BATCH,), generator=g)
        mask = (torch.arange(LENGTH) < lengths[:, None]).long()
        yield ids * mask, mask, torch.where(mask.bool(), ids, -100)


def lm_loss(logits, labels):
    """Next-token cross-entropy over the tokens that are not padding."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100)


class CausalLM(torch.nn.Module):
    """GPT-2's logits for (input ids, attention mask): what compile_train_step traces."""

    def __init__(self, gpt2):
        super().__init__()
        self.gpt2 = gpt2

    def forward(self, ids, mask):
        return self.gpt2(input_ids=ids, attention_mask=mask, use_cache=False).logits


def make_model(dropout: float, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                     n_positions=LENGTH, resid_pdrop=dropout,
                                     embd_pdrop=dropout, attn_pdrop=dropout)
    return CausalLM(transformers.GPT2LMHeadModel(config))


def optimizer_and_schedule(model, steps: int):
    """AdamW with the usual no-decay group, and a linear warm-up then linear decay."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: min((t + 1) / warmup, max(0.0, (steps - t) / (steps - warmup))))
    return opt, schedule


def train_loop(model, data, steps: int, times: list | None = None) -> list[float]:
    """The loop as written for eager; with a torch.compile'd model, the same loop. `times`
    gets each step's seconds."""
    opt, schedule = optimizer_and_schedule(model, steps)
    losses = []
    for ids, mask, labels in data:
        start = time.perf_counter()
        total = 0.0
        for part in zip(ids.chunk(ACCUMULATION), mask.chunk(ACCUMULATION), labels.chunk(ACCUMULATION)):
            loss = lm_loss(model(*part[:2]), part[2]) / ACCUMULATION
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        schedule.step()
        losses.append(total)
        if times is not None:
            times.append(time.perf_counter() - start)
    return losses


def compiled_step_loop(model, data, steps: int, search: str, times: list | None = None) -> list[float]:
    opt, schedule = optimizer_and_schedule(model, steps)
    step = sft.compile_train_step(model, lm_loss, opt, data[0], search=search, max_grad_norm=1.0,
                                  accumulation_steps=ACCUMULATION)
    losses = []
    for batch in data:
        start = time.perf_counter()
        losses.append(float(step(*batch)))
        schedule.step()  # read from param_groups at the next call
        if times is not None:
            times.append(time.perf_counter() - start)
    step.sync()
    return losses


def timed(label: str, fn):
    start = time.perf_counter()
    out = fn()
    print(f"{label}: {time.perf_counter() - start:.1f} s (compile included)")
    return out


VARIANTS = ("eager", "inductor", "backend", "step")


def time_variant(variant: str, steps: int, dropout: float, search: str) -> float:
    """Median seconds per training step of one entry point, after its first 5 steps (compiles,
    Dynamo's recompiles)."""
    data = list(batches(steps))
    model = make_model(dropout)
    times: list[float] = []
    torch.manual_seed(0)
    if variant == "step":
        compiled_step_loop(model, data, steps, search, times)
    else:
        options = {"eager": model, "inductor": torch.compile(model),
                   "backend": torch.compile(model, backend="sft", options={"search": search})}
        train_loop(options[variant], data, steps, times)
    steady = sorted(times[5:])
    return steady[len(steady) // 2]


def time_all(args) -> None:
    """Each entry point in a process of its own, one after another; ratios to eager and to
    inductor (torch.compile's default backend)."""
    import json
    import subprocess
    import sys

    seconds = {}
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--only", variant, "--steps", str(args.steps),
                              "--dropout", str(args.dropout), "--search", args.search],
                             capture_output=True, text=True, check=True).stdout
        seconds[variant] = json.loads(out.strip().splitlines()[-1])["seconds"]
    print(f"median seconds per step ({args.steps} steps, the first 5 left out), one process each:")
    for variant in VARIANTS:
        print(f"  {variant:<9} {seconds[variant] * 1e3:8.2f} ms   eager / this "
              f"{seconds['eager'] / seconds[variant]:5.2f}x   inductor / this "
              f"{seconds['inductor'] / seconds[variant]:5.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--search", default="none", choices=("none", "model", "verify"))
    p.add_argument("--eager-seeds", type=int, default=3, help="eager runs (dropout's spread)")
    p.add_argument("--plot", default="", help="write the loss curves to this PNG (matplotlib)")
    p.add_argument("--time", action="store_true", help="time each entry point, a process each")
    p.add_argument("--only", choices=VARIANTS, help=argparse.SUPPRESS)  # --time's worker
    args = p.parse_args()
    warnings.simplefilter("ignore")
    if args.only:
        import json

        print(json.dumps({"seconds": time_variant(args.only, args.steps, args.dropout, args.search)}))
        return
    if args.time:
        time_all(args)
        return
    data = list(batches(args.steps))
    model = make_model(args.dropout)
    seeds = range(args.eager_seeds if args.dropout else 1)
    eager = []
    for seed in seeds:
        torch.manual_seed(seed)
        eager.append(timed(f"eager (seed {seed})", lambda: train_loop(copy.deepcopy(model), data, args.steps)))
    torch.manual_seed(0)
    backend = timed("torch.compile(backend='sft')", lambda: train_loop(
        torch.compile(copy.deepcopy(model), backend="sft", options={"search": args.search}), data, args.steps))
    torch.manual_seed(0)
    step = timed("sft.compile_train_step", lambda: compiled_step_loop(copy.deepcopy(model), data, args.steps, args.search))

    def relative(a, b):
        return max(abs(x - y) / abs(y) for x, y in zip(a, b))

    tail = max(1, args.steps // 10)
    final = lambda curve: sum(curve[-tail:]) / tail  # noqa: E731
    print(f"loss {eager[0][0]:.3f} -> {final(eager[0]):.3f} (log(vocab) {math.log(VOCAB):.3f}; "
          f"final = mean of the last {tail} steps)")
    if not args.dropout:
        print(f"largest relative difference from eager: backend {relative(backend, eager[0]):.2e}, "
              f"compiled step {relative(step, eager[0]):.2e}")
    else:
        finals = [final(c) for c in eager]
        print(f"final loss: eager seeds {min(finals):.4f} .. {max(finals):.4f}; backend "
              f"{final(backend):.4f}; compiled step {final(step):.4f}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for seed, curve in zip(seeds, eager):
            label = ("PyTorch eager" + (f", {len(eager)} seeds" if args.dropout else "")) if seed == 0 else None
            ax.plot(curve, color="0.6", lw=1, label=label)
        ax.plot(backend, lw=1, label="torch.compile(backend='sft')")
        ax.plot(step, "--", lw=1, label="sft.compile_train_step")
        ax.set(xlabel="step", ylabel="cross-entropy", yscale="log",
               title=f"GPT-2 (Hugging Face, 2 layers), dropout {args.dropout}")
        ax.legend()
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
