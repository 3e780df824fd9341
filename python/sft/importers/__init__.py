"""Front ends: each turns a model into linalg-on-tensors MLIR text."""

from .mlir_text import import_mlir_file, import_mlir_text  # noqa: F401
from .torch import import_torch  # noqa: F401
