"""torch.export of a model, decomposed with torch-mlir's table, made to hold for models as
people write them (Hugging Face's with their defaults included).

Three things that fail in torch 2.13 and are mended here, each where it arises:

- a `view` recorded where the exported graph's strides allowed one stops being valid once the
  decompositions change a producer's strides (Hugging Face's default `sdpa` attention: "Cannot
  view a tensor with shape [2, 16, 64] and strides (64, 128, 1)"): in the functional exported
  graph a view and a reshape compute the same values, so views are traced as reshapes;
- the constants that `run_decompositions` lifts itself (the empty tensors a `DynamicCache`
  starts from) are left out of its constants ("Constant tensor lifted_tensor_0 is not in the
  constants dictionary"): they are put back, then the program's signature is checked;
- a `DynamicCache` in a model's output (`use_cache=True`, the default) is a pytree once
  Hugging Face's own registration for torch.export has run;
- a training step's trace (aot_autograd) is an export too, but torch says so only under
  torch.export: code that takes a data-dependent shortcut unless exporting (Hugging Face's
  attention mask, `padding_mask.all()`: "aten._local_scalar_dense") is told it is exporting.
"""

from __future__ import annotations

import contextlib
import sys

from ..errors import SftError


def export_decomposed(model, inputs: tuple, name: str):
    """`torch.export.export(model, inputs, strict=False)` decomposed with torch-mlir's table."""
    import torch
    from torch_mlir import fx

    _register_hugging_face_pytrees()
    prog = torch.export.export(model, inputs, strict=False)
    for node in prog.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    prog.graph_module.recompile()
    with _signature_checked_after_repair() as repair:
        decomposed = prog.run_decompositions(fx.get_decomposition_table())
        repair(decomposed, prog.constants, name)
    return decomposed


def exporting():
    """`torch.compiler.is_exporting()` and `is_compiling()` True inside: torch.export's own
    context for its non-strict trace."""
    from torch._export.utils import _compiling_state_context

    return _compiling_state_context()


def _register_hugging_face_pytrees() -> None:
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # another version of transformers: its outputs as they are
        return
    register_dynamic_cache_export_support()


@contextlib.contextmanager
def _signature_checked_after_repair():
    """torch's check of an ExportedProgram's signature put off until the constants
    `run_decompositions` lifted are restored (`repair(decomposed, original_constants, name)`)."""
    from torch._export import verifier

    check = verifier._verify_exported_program_signature

    def repair(prog, original: dict, name: str) -> None:
        import torch
        from torch.export.graph_signature import InputKind

        nodes = {n.name: n for n in prog.graph.nodes if n.op == "placeholder"}
        for spec in prog.graph_signature.input_specs:
            if spec.kind != InputKind.CONSTANT_TENSOR or spec.target in prog.constants:
                continue
            fake = nodes[spec.arg.name].meta.get("val")
            same = [v for k, v in original.items() if k.rpartition(".")[2] == spec.target]
            if fake is not None and fake.numel() == 0:
                prog.constants[spec.target] = torch.empty(fake.shape, dtype=fake.dtype)
            elif len(same) == 1:  # lifted again under the name without its module's prefix
                prog.constants[spec.target] = same[0]
            else:
                raise SftError(f"torch.export's decomposition lost the constant "
                               f"'{spec.target}'", name)
        check(prog)

    verifier._verify_exported_program_signature = lambda prog: None
    try:
        yield repair
    finally:
        verifier._verify_exported_program_signature = check
