"""The arrays a worker reads from DIR and how its outputs are checked against the expected."""

from __future__ import annotations

import numpy as np


def bf16():
    import ml_dtypes

    return ml_dtypes.bfloat16


def decode(array, dtype: str):
    """An array as the manifest says it is (bf16 is stored as its bits)."""
    return array.view(bf16()) if dtype == "bfloat16" else array


def compare(got, expected, dtype: str, tolerances: dict) -> dict:
    """Whether `got` matches `expected`: exactly for integers and booleans, else within
    atol * max(1, max|expected|) + rtol * |expected| (tolerances by dtype)."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return {"ok": False, "error": f"shape {list(got.shape)}, expected {list(expected.shape)}"}
    if dtype not in tolerances:
        same = bool(np.array_equal(got.astype(np.int64), expected.astype(np.int64)))
        return {"ok": same, "error": None if same else "values differ"}
    rtol, atol = tolerances[dtype]
    g, e = got.astype(np.float64), expected.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
    err = np.abs(g - e)
    finite = bool(np.all(np.isfinite(g) == np.isfinite(e)))
    ok = finite and bool(np.all((err <= atol * scale + rtol * np.abs(e)) | (g == e)))
    worst = float(np.nanmax(err)) if err.size else 0.0
    return {"ok": ok, "max_abs_err": worst, "scale": scale,
            "error": None if ok else f"max |error| {worst:.3g} over tolerance (scale {scale:.3g})"}


def compare_all(pairs, tolerances: dict) -> dict:
    """The record of the worst of (got, expected, dtype) pairs: the first that fails, else the
    one with the largest error."""
    worst = {"ok": True}
    for got, want, dtype in pairs:
        found = compare(got, want, dtype, tolerances)
        if not found["ok"]:
            return found
        if found.get("max_abs_err", 0) >= worst.get("max_abs_err", 0):
            worst = found
    return worst
