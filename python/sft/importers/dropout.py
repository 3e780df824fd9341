"""Train-mode dropout in a compiled training step, through a counter-based random number
generator: the mask is a hash of (seed, dropout site, element index), so the program draws
nothing (IREE has no random ops to lower) and the same seed gives the same mask, forward and
backward alike. The seed is an input of the step, drawn from torch's generator at each call
(`torch.manual_seed` makes a run repeatable). The masks are not torch's (a different
generator): the training agrees with eager's in distribution, not bit for bit.

The hash is a 32-bit integer mixer (multiply, xor-shift; the constants of MurmurHash3's
finalizer family) computed in int64, so every product fits and torch-mlir lowers it to plain
integer arithmetic.
"""

from __future__ import annotations

import contextlib
import math

from ..errors import SftError

_MASK32 = 0xFFFFFFFF


def uniform(seed, site: int, shape) -> object:
    """Floats in [0, 1) of `shape`, a function of `seed` (an int64 0-d tensor), the dropout
    `site` and each element's index alone."""
    import torch

    x = torch.arange(math.prod(shape), dtype=torch.int64)
    x = (x * 0x9E3779B1 + seed * 0x85EBCA77 + site * 0xC2B2AE3D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _MASK32
    x = x ^ (x >> 12)
    x = (x * 0x297A2D39) & _MASK32
    x = x ^ (x >> 15)
    return ((x >> 8).to(torch.float32) * (1.0 / (1 << 24))).reshape(tuple(shape))


def train_mode_dropouts(model, name: str) -> list:
    """The model's `nn.Dropout` modules in train mode with p > 0; an SftError for any other
    dropout kind in train mode (channel-wise or alpha dropout, which `counter_dropout` does not
    implement)."""
    import torch

    found = []
    for path, m in model.named_modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0:
            if type(m) is not torch.nn.Dropout:
                raise SftError(f"'{path}' is {type(m).__name__}(p={m.p}) in train mode: only "
                               "nn.Dropout is compiled in train mode; set p=0 or call .eval() on it", name)
            found.append(m)
    return found


@contextlib.contextmanager
def counter_dropout(modules: list):
    """While active, each module of `modules` (train-mode nn.Dropout), and the attention
    dropout of `F.scaled_dot_product_attention`, masks with `uniform` of the seed in the yielded
    holder (`holder["seed"]`, set by the traced function before the model runs;
    `holder["site"]` counts the dropout calls of one forward, each a site)."""
    holder = {"seed": None, "site": 0}

    def forward_of(module):
        return lambda x: masked(x, module.p)

    def masked(x, p):
        site = holder["site"]
        holder["site"] += 1
        return x * (uniform(holder["seed"], site, x.shape) >= p).to(x.dtype) * (1.0 / (1.0 - p))

    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        """Attention with dropout (Hugging Face's default `sdpa` passes its attention dropout
        here) as its math, the weights masked like nn.Dropout's output."""
        if not dropout_p or holder["seed"] is None:  # (no seed: its random op is refused)
            return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **kw)
        return _attention_math(q, k, v, attn_mask, is_causal, scale, kw.get("enable_gqa", False),
                               lambda w: masked(w, dropout_p))

    for m in modules:
        m.forward = forward_of(m)
    F.scaled_dot_product_attention = attention
    try:
        yield holder
    finally:
        F.scaled_dot_product_attention = sdpa
        for m in modules:
            del m.forward  # the class's forward again


def _attention_math(q, k, v, attn_mask, is_causal: bool, scale, enable_gqa: bool, dropout):
    """torch's scaled_dot_product_attention as its documentation states it, `dropout` applied
    to the attention weights."""
    import torch

    length, source = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    bias = torch.zeros(length, source, dtype=q.dtype)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(length, source, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        bias = bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else bias + attn_mask
    if enable_gqa:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale + bias, dim=-1)
    return dropout(weights) @ v
