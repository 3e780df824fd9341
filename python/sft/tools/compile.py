"""sft-compile: an .mlir file, or a Python file defining a model, to an IREE .vmfb."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from ..api import linalg_of, lower, to_sft
from ..backend import TARGETS, compile_module
from ..errors import SftError
from ..plan import Plan


def _load_python_model(path: str, name: str):
    """A Python file must define `model` (an nn.Module) and `example_inputs` (a tuple), or the
    names given by --model / --inputs; either may be a zero-argument function."""
    scope = runpy.run_path(path)
    try:
        model, inputs = scope[name], scope["example_inputs"]
    except KeyError as exc:
        raise SftError(f"{path} defines no '{exc.args[0]}'") from None
    model = model() if callable(model) and not hasattr(model, "forward") else model
    inputs = inputs() if callable(inputs) else inputs
    return model, tuple(inputs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sft-compile", description=__doc__)
    p.add_argument("input", help=".mlir file (linalg or sft), or .py file defining `model` and "
                                 "`example_inputs`")
    p.add_argument("-o", "--output", help="output .vmfb (default: input name with .vmfb)")
    p.add_argument("--target", default="host", choices=sorted(TARGETS))
    p.add_argument("--plan", help="JSON plan file (default: empty plan, IREE decides)")
    p.add_argument("--model", default="model", help="name of the model in a .py input")
    p.add_argument("--emit", choices=["vmfb", "sft", "linalg"], default="vmfb",
                   help="write the sft or lowered linalg text instead of a .vmfb")
    args = p.parse_args(argv)
    try:
        if args.input.endswith(".py"):
            model, inputs = _load_python_model(args.input, args.model)
            linalg, name = linalg_of(model, inputs)
        else:
            linalg, name = linalg_of(Path(args.input))
        plan = Plan.from_json(Path(args.plan).read_text()) if args.plan else Plan()
        sft_module = to_sft(linalg, name)
        sft_text = sft_module.operation.get_asm(enable_debug_info=False)
        lowered, planned = lower(sft_module, plan)
        output = args.output or str(Path(args.input).with_suffix("." + {"vmfb": "vmfb", "sft": "sft.mlir", "linalg": "linalg.mlir"}[args.emit]))
        if args.emit == "sft":
            Path(output).write_text(sft_text)
        elif args.emit == "linalg":
            Path(output).write_text(planned)
        else:
            artifact = compile_module(planned, args.target, plan.flags)
            Path(output).write_bytes(artifact.vmfb)
            print(f"{output}: {artifact.dispatch_count} dispatches", file=sys.stderr)
    except SftError as exc:
        print(f"sft-compile: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
