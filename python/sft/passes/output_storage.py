"""sft-output-storage: results written in place into storage the caller passes.

A training step's new state replaces its old state. IREE writes a result into a buffer the
caller gives when an argument carries `iree.abi.output = <result>`; put on the argument that
holds the old value (what IREE's input phase makes of JAX's donation), IREE 3.13 writes the new
value before the program's last read of the old one (docs/results.md, "State in place"). So
each such result gets an argument of its own, after the others, that the program never reads:
the caller passes there the buffer of the value before the old one (two buffers per value,
taking turns), and IREE allocates nothing for the result.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import iree_ir


@dataclass(frozen=True)
class OutputStoragePass:
    """@`entry` takes, after its arguments, one storage argument per result index in
    `results` (that result's type, `{iree.abi.output = index}`). Works on a module in IREE's
    context (planned linalg)."""

    entry: str
    results: tuple[int, ...]

    name = "sft-output-storage"

    def __call__(self, module) -> None:
        if not self.results:
            return
        with module.context, iree_ir.Location.unknown():
            func = next(op for op in module.body.operations if op.operation.name == "func.func"
                        and iree_ir.StringAttr(op.attributes["sym_name"]).value == self.entry)
            ftype = iree_ir.FunctionType(iree_ir.TypeAttr(func.attributes["function_type"]).value)
            inputs, results = list(ftype.inputs), list(ftype.results)
            attrs = (list(iree_ir.ArrayAttr(func.attributes["arg_attrs"]))
                     if "arg_attrs" in func.attributes
                     else [iree_ir.DictAttr.get({}) for _ in inputs])
            block = func.regions[0].blocks[0]
            index = iree_ir.IndexType.get()
            for r in self.results:
                block.add_argument(results[r], iree_ir.Location.unknown())
                attrs.append(iree_ir.DictAttr.get({"iree.abi.output": iree_ir.IntegerAttr.get(index, r)}))
            func.attributes["function_type"] = iree_ir.TypeAttr.get(
                iree_ir.FunctionType.get(inputs + [results[r] for r in self.results], results))
            func.attributes["arg_attrs"] = iree_ir.ArrayAttr.get(attrs)
