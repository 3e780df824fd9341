"""PyTorch nn.Module + example inputs -> linalg-on-tensors text, through torch-mlir's FX importer."""

from __future__ import annotations

import re
import warnings

from ..errors import SftError

_FAILED_OP = re.compile(r"failed to legalize operation '([^']+)'")


def import_torch(model, example_inputs, func_name: str = "main") -> str:
    """Export `model` at `example_inputs`' shapes and lower it to linalg-on-tensors text."""
    import torch
    from torch_mlir import fx

    if not isinstance(model, torch.nn.Module):
        raise SftError(f"expected a torch.nn.Module, got {type(model).__name__}")
    inputs = tuple(example_inputs)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise SftError("example inputs must be torch tensors")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = fx.export_and_import(model.eval(), *inputs, output_type="linalg-on-tensors",
                                          func_name=func_name)
    except Exception as exc:  # torch.export or torch-mlir failed: name the op where we can
        text = str(exc)
        match = _FAILED_OP.search(text)
        loc = re.search(r'loc\("([^"]+)":(\d+):(\d+)\)', text)
        where = f"{loc[1]}:{loc[2]}:{loc[3]}" if loc else type(model).__name__
        if match:
            raise SftError(f"unsupported op '{match[1]}' (torch-mlir cannot lower it to linalg)",
                           where) from None
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        raise SftError(f"could not import the model: {first}", where) from None
    return module.operation.get_asm(enable_debug_info=False)
