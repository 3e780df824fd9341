"""MLIR text (linalg-on-tensors, or sft) as a front end."""

from __future__ import annotations

from pathlib import Path

from ..errors import SftError


def import_mlir_text(text: str) -> str:
    if "func.func" not in text and "func @" not in text:
        raise SftError("expected an MLIR module with a func.func", "<input>")
    return text


def import_mlir_file(path: str | Path) -> str:
    try:
        return import_mlir_text(Path(path).read_text())
    except OSError as exc:
        raise SftError(f"cannot read {path}: {exc.strerror}") from None
