"""Small models built in code with random weights: the bundled suite that tests and benchmarks use.

Nothing here downloads weights; every model is seeded so that runs are repeatable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    """GPT-2 style masked multi-head attention written with plain torch ops."""

    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_len, max_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        hd = d // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class DecoderBlock(nn.Module):
    """One pre-norm GPT-2 decoder block: masked attention and a GELU MLP, each residual."""

    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, max_len)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT2(nn.Module):
    """A GPT-2 language model: token + position embedding, `layers` decoder blocks, the final
    norm and the LM head. GPT-2 small is GPT2(50257, 768, 12, 1024, 12): 124M parameters (the
    head shares nothing here, so 163M)."""

    def __init__(self, vocab: int = 512, dim: int = 128, heads: int = 4, max_len: int = 64,
                 layers: int = 1):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads, max_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


GPT2Block = GPT2  # one decoder block by default


class ConvBlock(nn.Module):
    """Conv2d + BatchNorm (eval) + ReLU + max and average pooling, a small CNN stem."""

    def __init__(self, cin: int = 3, cout: int = 16):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


class MLP(nn.Module):
    def __init__(self, dims=(256, 1024, 256), act: Callable[[], nn.Module] = nn.GELU):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims, dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers.append(act())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class MultiheadSelfAttention(nn.Module):
    def __init__(self, dim: int = 128, heads: int = 4):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class LinearAttention(nn.Module):
    """Multi-head linear attention (Katharopoulos et al. 2020, feature map elu + 1), written the
    way the formula reads: (phi(Q) phi(K)^T) V. Evaluated as phi(Q) (phi(K)^T V) it costs
    sequence / head-dim times less: the order is the compiler's to choose."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape

        def split(t):  # [b, n, d] -> [b, heads, n, d / heads]
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = F.elu(split(self.q(x))) + 1, F.elu(split(self.k(x))) + 1, split(self.v(x))
        out = (q @ k.transpose(-2, -1)) @ v / n
        return out.transpose(1, 2).reshape(b, n, d)


@dataclass(frozen=True)
class ModelCase:
    """A named model with the inputs it is compiled and checked on."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]


def _randn(*shape):
    return lambda: (torch.randn(*shape),)


def _prep(module_fn):
    def build():
        torch.manual_seed(0)
        m = module_fn()
        for mod in m.modules():  # give BatchNorm non-trivial statistics
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
        return m.eval()

    return build


SUITE: dict[str, ModelCase] = {
    case.name: case
    for case in [
        ModelCase("linear", _prep(lambda: nn.Linear(64, 128)), _randn(8, 64)),
        ModelCase("gelu", _prep(nn.GELU), _randn(8, 256)),
        ModelCase("relu", _prep(nn.ReLU), _randn(8, 256)),
        ModelCase("silu", _prep(nn.SiLU), _randn(8, 256)),
        ModelCase("tanh", _prep(nn.Tanh), _randn(8, 256)),
        ModelCase("layernorm", _prep(lambda: nn.LayerNorm(128)), _randn(8, 128)),
        ModelCase("softmax", _prep(lambda: nn.Softmax(dim=-1)), _randn(8, 128)),
        ModelCase("mlp", _prep(MLP), _randn(32, 256)),
        ModelCase("mha", _prep(MultiheadSelfAttention), _randn(2, 32, 128)),
        ModelCase(
            "transformer_layer",
            _prep(lambda: nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)),
            _randn(2, 32, 128),
        ),
        ModelCase(
            "gpt2_block",
            _prep(GPT2Block),
            lambda: (torch.randint(0, 512, (2, 32)),),
        ),
        ModelCase("conv_bn_relu_pool", _prep(ConvBlock), _randn(2, 3, 32, 32)),
        ModelCase("linear_attention", _prep(LinearAttention), _randn(2, 256, 64)),
    ]
}

# The benchmark adds sizes the tests do not need: a GPT-2 block at a second, larger size and an
# MLP at three batch sizes.
BENCH_SUITE: dict[str, ModelCase] = {
    **SUITE,
    **{case.name: case for case in [
        ModelCase("gpt2_block_large", _prep(lambda: GPT2Block(vocab=1024, dim=256, heads=8, max_len=128)),
                  lambda: (torch.randint(0, 1024, (2, 64)),)),
        ModelCase("mlp_b1", _prep(MLP), _randn(1, 256)),
        ModelCase("mlp_b128", _prep(MLP), _randn(128, 256)),
    ]},
}

# Models whose compile cost is the point (sft-bench compile), too large to time call by call.
LARGE_SUITE: dict[str, ModelCase] = {
    case.name: case
    for case in [
        ModelCase("gpt2_small", _prep(lambda: GPT2(50257, 768, 12, 1024, 12)),
                  lambda: (torch.randint(0, 50257, (1, 128)),)),
        ModelCase("gpt2_4layer_d256", _prep(lambda: GPT2(50257, 256, 4, 256, 4)),
                  lambda: (torch.randint(0, 50257, (1, 64)),)),
    ]
}
