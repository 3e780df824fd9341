"""sft-compile: an .mlir file, or a Python file defining a model, to an IREE .vmfb."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from .. import ir
from ..api import _input_specs, _specs_from_mlir, linalg_of, lower, searched_plan, to_sft
from ..backend import TARGETS, compile_module
from ..errors import SftError
from ..plan import Plan
from ..tuning_db import TuningDB


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
    p.add_argument("--search", choices=["none", "model", "verify"], default="none",
                   help="model: the cost model's best plan; verify: the best measured (default: "
                        "none, IREE decides)")
    p.add_argument("--report", metavar="FILE", help="write the search report (.json: JSON, else text)")
    p.add_argument("--model", default="model", help="name of the model in a .py input")
    p.add_argument("--emit", choices=["vmfb", "sft", "linalg", "plan"], default="vmfb",
                   help="write the sft or lowered linalg text, or the plan JSON, instead of a .vmfb")
    args = p.parse_args(argv)
    try:
        if args.input.endswith(".py"):
            model, inputs = _load_python_model(args.input, args.model)
            linalg, name = linalg_of(model, inputs)
            specs = _input_specs(inputs)
        else:
            linalg, name = linalg_of(Path(args.input))
            specs = None
        plan = Plan.from_json(Path(args.plan).read_text()) if args.plan else Plan()
        sft_module = to_sft(linalg, name)
        sft_text = ir.print_module(sft_module)
        if args.search != "none" and not args.plan:
            specs = specs or _specs_from_mlir(linalg)
            plan, report = searched_plan(sft_text, args.target, args.search, specs, TuningDB())
            print(report.to_text(), file=sys.stderr)
            if args.report:
                Path(args.report).write_text(report.to_json() if args.report.endswith(".json")
                                             else report.to_text() + "\n")
        lowered, planned = lower(sft_module, plan)
        suffix = {"vmfb": "vmfb", "sft": "sft.mlir", "linalg": "linalg.mlir", "plan": "plan.json"}
        output = args.output or str(Path(args.input).with_suffix("." + suffix[args.emit]))
        if args.emit == "plan":
            Path(output).write_text(plan.to_json() + "\n")
        elif args.emit == "sft":
            Path(output).write_text(sft_text)
        elif args.emit == "linalg":
            Path(output).write_text(planned)
        else:
            artifact = compile_module(planned, args.target, plan.flags)
            Path(output).write_bytes(artifact.vmfb)
            run_on = f"; run it with --device={plan.driver}" if plan.driver else ""
            print(f"{output}: {artifact.dispatch_count} dispatches{run_on}", file=sys.stderr)
    except SftError as exc:
        print(f"sft-compile: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
