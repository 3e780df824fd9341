"""Conformance: every case of `conformance_cases` against PyTorch eager, three ways.

1. IREE alone: torch-mlir's import, then `iree-compile` with sft's host flags, run with
   `iree.runtime` directly (neither sft's importer nor its runtime wrapper, so that this is
   torch-mlir's and IREE's result and nobody else's).
2. `sft.compile(model, inputs, search="none")`, called with torch tensors.
3. `sft.compile(model, inputs, search="model")`.

A case fails when sft (2 or 3) fails or differs from eager (values within the dtype's tolerance,
dtype, shape and the output's structure: tensor, tuple, list, dict keys, Python scalar, inputs
updated in place) on a module that IREE alone gets right. Where IREE alone is wrong or fails,
the case is listed in `known_iree_failures.py` with IREE's error, and the case checks that IREE
alone still fails that way, so that the list stays true.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_flatten

import sft
from sft.backend import compile_module
from sft.targets import get_target

from conformance_cases import CASES
from known_iree_failures import FIXED_BY_SFT, KNOWN_IREE_FAILURES

HOST = get_target("host")

# (rtol, atol) per result dtype; integers and bools compare exactly. f16/bf16: eager computes
# many ops in f32 and rounds once, IREE may round every step.
TOLERANCE = {torch.float64: (1e-9, 1e-11), torch.float32: (1e-4, 1e-5),
             torch.float16: (1e-2, 1e-2), torch.bfloat16: (4e-2, 4e-2)}


# ---- comparison with eager ----

def compare_leaf(got, want, where: str, case) -> list[str]:
    if not isinstance(want, torch.Tensor):  # a Python scalar stays one, of the same type
        if type(got) is not type(want):
            return [f"{where}: expected Python {type(want).__name__} {want!r}, got {type(got).__name__}"]
        return [] if got == want or abs(got - want) <= 1e-6 * abs(want) else [f"{where}: {got!r} != {want!r}"]
    if not isinstance(got, torch.Tensor):
        return [f"{where}: expected a tensor, got {type(got).__name__}"]
    if got.dtype != want.dtype:
        return [f"{where}: dtype {got.dtype} != {want.dtype}"]
    if got.shape != want.shape:
        return [f"{where}: shape {list(got.shape)} != {list(want.shape)}"]
    if want.dtype.is_floating_point:
        rtol, atol = TOLERANCE[want.dtype]
        rtol, atol = case.rtol or rtol, case.atol or atol
        g, w = got.double(), want.double()
        if not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            err = ((g - w).abs() - rtol * w.abs()).nan_to_num(float("inf")).max().item()
            return [f"{where}: values differ (max excess error {err:.3g}, rtol {rtol}, atol {atol})"]
    elif not torch.equal(got, want):
        bad = (got != want).sum().item()
        return [f"{where}: values differ in {bad} of {want.numel()} elements"]
    return []


def compare(got, want, case, where: str = "out") -> list[str]:
    """Problems of `got` against eager's `want`: structure, then each leaf."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: expected a dict with keys {list(want)}, got {type(got).__name__}"]
        if list(got) != list(want):
            return [f"{where}: keys {list(got)} != {list(want)}"]
        return [p for k in want for p in compare(got[k], want[k], case, f"{where}[{k!r}]")]
    if isinstance(want, (tuple, list)):  # torch.return_types (max, sort, ...) are tuples
        kind = tuple if isinstance(want, tuple) else list
        if not isinstance(got, kind) or len(got) != len(want):
            what = f"{type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
            return [f"{where}: expected a {kind.__name__} of {len(want)}, got {what}"]
        return [p for i, (g, w) in enumerate(zip(got, want)) for p in compare(g, w, case, f"{where}[{i}]")]
    return compare_leaf(got, want, where, case)


# ---- the three ways ----

def eager(case):
    """Eager's result and the inputs after the call (updated in place by some cases)."""
    inputs = case.inputs()
    with torch.no_grad():
        out = case.module()(*inputs)
    return out, inputs


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; IREE takes ml_dtypes' (same bits)
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_iree(value, want):
    """IREE's result as torch, same dtype. Python scalars (i64/f64 results) stay as they are."""
    if not hasattr(value, "to_host"):
        return value
    arr = np.asarray(value.to_host())
    if arr.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    t = torch.from_numpy(arr.copy())
    # MLIR integers are signless: IREE hands an i8 result back as int8 whatever PyTorch meant,
    # so a uint8 result is read as the same bits.
    if isinstance(want, torch.Tensor) and want.dtype == torch.uint8 and t.dtype == torch.int8:
        t = t.view(torch.uint8)
    return t


_RUNTIME = {}
LOC = re.compile(r'^loc\(.*?\):\s*')


def run_iree_alone(case, linalg: str, want_leaves: list) -> list:
    import iree.runtime as rt

    artifact = compile_module(linalg, HOST)  # the host target keeps f64, as sft.compile does
    if "config" not in _RUNTIME:  # one device and thread pool per process
        _RUNTIME["config"] = rt.Config(HOST.driver)
    ctx = rt.SystemContext(config=_RUNTIME["config"])
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, artifact.vmfb))
    out = ctx.modules.module["main"](*[to_numpy(x) for x in case.inputs()])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [from_iree(o, w) for o, w in zip(outs, want_leaves)] + outs[len(want_leaves):]


def import_alone(case) -> str:
    """torch-mlir's own import, weights as constants, as IREE's users get it: independent of
    sft's importer (which has policies of its own, such as refusing uint8)."""
    from torch_mlir import fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = fx.export_and_import(case.module(), *case.inputs(), output_type="linalg-on-tensors",
                                      func_name="main")
    return module.operation.get_asm(enable_debug_info=False)


ISOLATED_IMPORT = """
import sys
import test_conformance as t
from conformance_cases import CASES
sys.stdout.write(t.import_alone(CASES[sys.argv[1]]))
"""


def import_alone_isolated(case) -> str:
    """`import_alone` in a process of its own: for the cases where torch-mlir crashes."""
    proc = subprocess.run([sys.executable, "-c", ISOLATED_IMPORT, case.id], cwd=Path(__file__).parent,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode < 0:
        raise RuntimeError(f"torch-mlir crashed (signal {-proc.returncode})")
    if proc.returncode != 0:
        errors = [LOC.sub("", l) for l in proc.stderr.splitlines() if "error" in l.lower()]
        raise RuntimeError(" | ".join(errors[-2:]) or proc.stderr[-300:])
    return proc.stdout


def iree_alone_problems(case, want, mutated_inputs, capfd, isolated=False) -> list[str]:
    """What IREE alone gets wrong: its error, or the differences from eager. torch.export
    returns the inputs a module updates in place first, then the outputs, flattened."""
    want_leaves = [mutated_inputs[i] for i in case.mutated] + tree_flatten(want)[0]
    capfd.readouterr()
    try:
        linalg = import_alone_isolated(case) if isolated else import_alone(case)
    except Exception as exc:  # noqa: BLE001 — any failure is the finding
        # torch-mlir prints its diagnostics to stderr and raises a generic error: keep both
        errors = [LOC.sub("", l) for l in capfd.readouterr().err.splitlines() if "error:" in l]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"import: {first} " + " | ".join(errors[:2])]
    try:
        got = run_iree_alone(case, linalg, want_leaves)
    except Exception as exc:  # noqa: BLE001
        return [f"{type(exc).__name__}: {exc}"]
    if len(got) != len(want_leaves):
        return [f"{len(got)} results, eager has {len(want_leaves)}"]
    return [p for i, (g, w) in enumerate(zip(got, want_leaves)) for p in compare_leaf(g, w, f"result {i}", case)]


def sft_problems(case, search: str, want, mutated_inputs) -> list[str]:
    tag = f"sft[{search}]"
    try:
        compiled = sft.compile(case.module(), case.inputs(), search=search)
        inputs = case.inputs()
        got = compiled(*inputs)
    except Exception as exc:  # noqa: BLE001
        return [f"{tag}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
    problems = compare(got, want, case, tag)
    for i in case.mutated:  # eager updated this input in place: so must sft
        problems += compare_leaf(inputs[i], mutated_inputs[i], f"{tag} input {i} after the call", case)
    return problems


@pytest.fixture
def shared_import(monkeypatch):
    """sft's torch import once per case, shared by search="none" and "model": its importer
    memoised for the test, keyed by the module's class, its function and the inputs' specs
    (within one case, the same program). Only where sft's importer has this name; else each
    compile imports again, slower but the same."""
    for where in (sys.modules.get("sft.api"), sys.modules.get("sft.program")):
        original = getattr(where, "import_torch", None)
        if original is None:
            continue
        memo = {}

        def memoised(model, example_inputs, *args, _original=original, _memo=memo, **kwargs):
            key = (type(model), getattr(model, "fn", None),
                   tuple((tuple(x.shape), x.dtype) for x in example_inputs), args, tuple(kwargs.items()))
            if key not in _memo:
                _memo[key] = _original(model, example_inputs, *args, **kwargs)
            return _memo[key]

        monkeypatch.setattr(where, "import_torch", memoised)


# IREE alone decides only whether a failure is sft's, so by default it runs where sft fails and
# on the listed cases (to keep the list true); SFT_CONFORMANCE_AUDIT=1 runs it on every case and
# fails the unlisted ones it gets wrong (to keep the list complete).
AUDIT = os.environ.get("SFT_CONFORMANCE_AUDIT", "") not in ("", "0")


@pytest.mark.parametrize("case_id", list(CASES))
def test_conformance(case_id, shared_import, capfd):
    case = CASES[case_id]
    want, mutated_inputs = eager(case)
    known = KNOWN_IREE_FAILURES.get(case_id)
    if known is not None:
        # IREE alone is the reference of what can be right; sft is not judged on this case.
        iree = iree_alone_problems(case, want, mutated_inputs, capfd, isolated="crashed" in known)
        assert iree, f"IREE alone now gets {case_id} right: remove it from known_iree_failures.py"
        assert any(known in p for p in iree), \
            f"IREE alone fails {case_id} otherwise than listed ({known!r}): {iree[0]}"
        if case_id not in FIXED_BY_SFT:
            return
    if AUDIT:
        iree = iree_alone_problems(case, want, mutated_inputs, capfd)
        assert not iree, f"IREE alone fails {case_id}, not listed in known_iree_failures.py: {'; '.join(iree)}"[:2000]
    problems = sft_problems(case, "none", want, mutated_inputs) + sft_problems(case, "model", want, mutated_inputs)
    if problems and not AUDIT and known is None:
        iree = iree_alone_problems(case, want, mutated_inputs, capfd)
        assert not iree, (f"IREE alone fails {case_id} too, not listed in known_iree_failures.py: "
                          f"{'; '.join(iree)} (sft: {'; '.join(problems)})")[:2000]
    assert not problems, "; ".join(problems)[:2000]
