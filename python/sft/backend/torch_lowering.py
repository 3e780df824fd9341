"""torch-mlir's lowering of a torch-dialect module to linalg-on-tensors, in a process of its
own. On some programs (8-bit integer arithmetic with Python scalars, uint8 reductions) it
prints an error and then segfaults: that must be an error for the caller, not its end.

Run as `python -m sft.backend.torch_lowering IN OUT`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SftError
from ..paths import scratch_dir
from .iree import compile_timeout
from .process import exit_text, run_group
from .timing import _worker_env


def lower_isolated(torch_text: str, timeout: float | None = None) -> str:
    """linalg-on-tensors text of a torch-dialect module, lowered by a child process."""
    with scratch_dir() as tmp:
        src, out = tmp / "torch.mlir", tmp / "linalg.mlir"
        src.write_text(torch_text)
        proc = run_group([sys.executable, "-m", "sft.backend.torch_lowering", str(src), str(out)],
                         timeout or compile_timeout(), env=_worker_env())
        if proc.returncode != 0:
            lines = proc.stderr.splitlines()
            first = next((l.strip() for l in lines if "error" in l), lines[-1] if lines else "")
            raise SftError(f"torch-mlir could not lower the model ({exit_text(proc.returncode)}): {first}")
        return out.read_text()


def _main(src: str, out: str) -> None:
    from torch_mlir import ir
    from torch_mlir.compiler_utils import OutputType
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.fx import _module_lowering

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    module = ir.Module.parse(Path(src).read_text(), ctx)
    lowered = _module_lowering(False, False, OutputType.LINALG_ON_TENSORS, module)
    Path(out).write_text(lowered.operation.get_asm(enable_debug_info=False))


if __name__ == "__main__":
    _main(*sys.argv[1:3])
