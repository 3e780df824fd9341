"""The only module that imports MLIR Python bindings.

Two sets of bindings live side by side: torch-mlir's (`tm`, which can load IRDL dialects, so the
sft dialect lives there) and IREE's (`iree_ir`, which knows flow and iree_codegen). IR passes
between the two contexts as text.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from iree.compiler import ir as iree_ir  # noqa: F401  (re-exported)
from iree.compiler import passmanager as iree_passmanager  # noqa: F401
from iree.compiler.dialects import linalg as iree_linalg
from iree.compiler.dialects import tensor as iree_tensor
from torch_mlir import ir as tm  # noqa: F401
from torch_mlir import passmanager as tm_passmanager
from torch_mlir.dialects import arith, irdl, linalg, tensor  # noqa: F401

from .errors import SftError

# The bindings look for a Python module of a dialect's op classes each time they wrap one of its
# ops, and remember only one they found: with none for sft, every sft op wrapped was a failed
# import (38,579 of them, 1.6 s of a GPT-2 small search). An empty one is found once; the ops
# keep the generic wrapper they had.
sys.modules.setdefault("torch_mlir.dialects.sft", types.ModuleType("torch_mlir.dialects.sft"))

DIALECT_FILE = Path(__file__).resolve().parent / "dialects" / "sft.irdl.mlir"
if not DIALECT_FILE.exists():  # running from a source checkout
    DIALECT_FILE = Path(__file__).resolve().parents[2] / "dialects" / "sft.irdl.mlir"

_LOC = re.compile(r'loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)\)')


def where(location) -> str | None:
    """`file:line:col` of an MLIR location (the innermost file location in it), or None."""
    match = _LOC.search(str(location))
    if not match:
        return None
    name = "<input>" if match["file"] == "-" else match["file"]  # text parsed from memory
    return f"{name}:{match['line']}:{match['col']}"


def sft_context() -> tm.Context:
    """A torch-mlir context with the sft dialect loaded from its IRDL definition.

    Ops of dialects this context does not register (torch-mlir's `tm_tensor`, IREE's own) are
    allowed: sft carries them through unchanged, inside `sft.opaque`."""
    ctx = tm.Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        irdl.load_dialects(tm.Module.parse(DIALECT_FILE.read_text()))
    return ctx


def _mlir_error(exc: Exception, filename: str) -> SftError:
    """Turn the bindings' MLIRError into one line: the first diagnostic, with its location."""
    diagnostics = getattr(exc, "error_diagnostics", None) or []
    if diagnostics:
        diag = diagnostics[0]
        loc = where(diag.location)
        if loc and loc.startswith("<input>:"):
            loc = filename + loc[len("<input>"):]
        return SftError(diag.message, loc)
    text = str(exc).splitlines()
    return SftError(text[1].strip() if len(text) > 1 else text[0], filename)


_UNKNOWN_DIALECT = re.compile(r"Dialect `[\w.]+' not found for custom op")


def parse(ctx, text: str, filename: str = "<input>"):
    """Parse MLIR text in `ctx`; malformed input raises SftError with file:line:col.

    When `filename` is the file the text came from, op locations name it. In sft's context, an
    op in the custom syntax of a dialect it does not register (`tm_tensor.scan ...`) is read
    through IREE's context, which knows it, and carried over in the generic form that any
    context parses."""
    module_cls = tm.Module if isinstance(ctx, tm.Context) else iree_ir.Module
    with ctx:
        try:
            path = Path(filename)
            if filename and path.is_file() and path.read_text() == text:
                return module_cls.parseFile(str(path))
            return module_cls.parse(text)
        except Exception as exc:  # MLIRError
            error = _mlir_error(exc, filename)
    if module_cls is tm.Module and _UNKNOWN_DIALECT.search(error.message):
        known = parse(iree_ir.Context(), text, filename)  # raises if IREE does not know it either
        generic = known.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
        with ctx:
            try:
                return tm.Module.parse(generic)
            except Exception as exc:
                raise _mlir_error(exc, filename) from None
    raise error


def dialects_of(module) -> tuple:
    """(ir, linalg, tensor): the bindings `module` lives in (IREE's or torch-mlir's), to build
    ops in its context."""
    if isinstance(module, iree_ir.Module):
        return iree_ir, iree_linalg, iree_tensor
    return tm, linalg, tensor


def verify(module, filename: str = "<input>") -> None:
    try:
        module.operation.verify()
    except Exception as exc:
        raise _mlir_error(exc, filename) from None


def run_pipeline(module, pipeline: str, filename: str = "<input>") -> None:
    """Run a textual upstream pass pipeline (anchored on builtin.module) on a torch-mlir module."""
    with module.context:
        try:
            tm_passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
        except Exception as exc:
            raise _mlir_error(exc, filename) from None


def print_module(module, generic: bool = False) -> str:
    return module.operation.get_asm(print_generic_op_form=generic, enable_debug_info=False)
