"""What a generated program is made of: values carrying their exact meaning (float64), the
rounding error a correct compiler may add and their magnitude; the program with its inputs and
reference outputs, which judges a compiled result; and the text and index-map helpers the
builder (programs.py) spells ops with."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SAFETY = 4.0                           # slack over the linear error bound (FMA, libm ulps)
NP_TYPES = {"f32": np.float32, "f64": np.float64}
EPS = {name: float(np.finfo(t).eps) for name, t in NP_TYPES.items()}


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    ref: np.ndarray      # the exact value (float64)
    err: np.ndarray      # bound on |computed - ref| in units of eps
    mag: np.ndarray      # the value with absolute values everywhere: what errors of sums scale with
    constant: bool = False  # computed from constants only (a fill, a map ignoring its inputs)


@dataclass
class Program:
    """One random function `@main`, its inputs and the outputs it must give."""

    text: str
    dtype: str
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    err: list[np.ndarray]
    ops: list[str] = field(default_factory=list)  # the kinds of ops generated, in order
    features: set[str] = field(default_factory=set)  # notable patterns, to recognise known bugs

    def tolerance(self, i: int) -> np.ndarray:
        return SAFETY * EPS[self.dtype] * (self.err[i] + 1.0) + 1e-3 * EPS[self.dtype]

    def compare(self, outputs) -> str | None:
        """None when every output is within its tolerance; else what differs most, in a line."""
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        if len(outputs) != len(self.expected):
            return f"{len(outputs)} outputs, expected {len(self.expected)}"
        for i, (got, want) in enumerate(zip(outputs, self.expected)):
            got = np.asarray(got)
            if got.shape != want.shape:
                return f"output {i}: shape {got.shape}, expected {want.shape}"
            diff = np.abs(got.astype(np.float64) - want)
            diff = np.where(np.isnan(diff), np.inf, diff)
            ratio = diff / self.tolerance(i)
            if ratio.size and ratio.max() > 1.0:
                at = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
                bad = int((ratio > 1.0).sum())
                return (f"output {i}: {bad}/{ratio.size} elements off; at {tuple(int(x) for x in at)} "
                        f"got {got[at]!r}, expected {want[at]!r} (tolerance {self.tolerance(i)[at]:.3g})")
        return None


def ttype(shape, dtype: str) -> str:
    return "tensor<" + "".join(f"{s}x" for s in shape) + dtype + ">"


def amap(rank: int, exprs) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


def segments(n: int, init: bool = False) -> str:
    return "array<i32: " + ", ".join(["1"] * n + ["0"] * (8 - n) + ["1"] * init) + ">"


def indices(exprs, domain) -> list[np.ndarray]:
    """Each expression's value at every point of the domain (the generator wrote them)."""
    grid = np.indices(domain, dtype=np.int64) if domain else []
    env = {f"d{i}": grid[i] for i in range(len(domain))}
    out = []
    for e in exprs:
        value = eval(e.replace("floordiv", "//").replace("mod", "%"), {}, dict(env))  # noqa: S307
        out.append(np.broadcast_to(np.asarray(value, dtype=np.int64), tuple(domain)))
    return out


def gather(arr: np.ndarray, exprs, domain, fill: float = 0.0) -> np.ndarray:
    """arr[map(d)] at every point d of the domain, `fill` where the map falls outside arr."""
    if arr.ndim == 0:
        return np.broadcast_to(arr, tuple(domain)).copy()
    idx = indices(exprs, domain)
    inside = np.ones(tuple(domain), dtype=bool)
    for i, size in zip(idx, arr.shape):
        inside &= (i >= 0) & (i < size)
    clipped = tuple(np.clip(i, 0, size - 1) for i, size in zip(idx, arr.shape))
    return np.where(inside, arr[clipped], fill)


def identity(rank: int) -> list[str]:
    return [f"d{i}" for i in range(rank)]


@dataclass
class Node:
    """A scalar of a body: its SSA name and its value, error and magnitude over the domain."""

    name: str
    ref: np.ndarray
    err: np.ndarray
    mag: np.ndarray
    reads_input: bool = False  # depends on a block argument (not only constants and indices)
