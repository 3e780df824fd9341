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
    """While active, each module of `modules` (train-mode nn.Dropout) masks with `uniform` of
    the seed in the yielded holder (`holder["seed"]`, set by the traced function before the
    model runs; `holder["site"]` counts the dropout calls of one forward, each a site)."""
    holder = {"seed": None, "site": 0}

    def forward_of(module):
        def forward(x):
            site = holder["site"]
            holder["site"] += 1
            keep = uniform(holder["seed"], site, x.shape) >= module.p
            return x * keep.to(x.dtype) * (1.0 / (1.0 - module.p))
        return forward

    for m in modules:
        m.forward = forward_of(m)
    try:
        yield holder
    finally:
        for m in modules:
            del m.forward  # the class's forward again
