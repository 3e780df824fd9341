"""sft-compile: an .mlir file, or a Python file defining a model, to an IREE .vmfb."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

import numpy as np

from ..search.strategy import PRECISIONS, check_precision, searched_plan
from ..program import lower, prepare
from ..backend import compile_module
from ..targets import get_target, target_names
from ..errors import SftError
from ..plan import Plan
from ..tuning_db import TuningDB
from .opt import read_input, run_tool, write_output


def _load_python_model(path: str, name: str):
    """A Python file must define `model` (an nn.Module) and `example_inputs` (a tuple), or the
    names given by --model / --inputs; either may be a zero-argument function."""
    try:
        scope = runpy.run_path(path)
    except SyntaxError as exc:
        raise SftError(exc.msg, f"{path}:{exc.lineno or 1}:{exc.offset or 1}") from None
    try:
        model, inputs = scope[name], scope["example_inputs"]
    except KeyError as exc:
        raise SftError(f"{path} defines no '{exc.args[0]}'") from None
    model = model() if callable(model) and not hasattr(model, "forward") else model
    inputs = inputs() if callable(inputs) else inputs
    return model, tuple(inputs)


def _check_writable(path: str) -> None:
    """Fail before any work (a search can take minutes) when an output cannot be written."""
    out = Path(path)
    folder = out.parent
    if out.is_dir():
        raise SftError(f"cannot write {path}: Is a directory")
    if not folder.is_dir():
        raise SftError(f"cannot write {path}: no folder {folder}")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise SftError(f"cannot write {path}: Permission denied")


def main(argv: list[str] | None = None) -> int:
    """sft-compile's entry point: 0 on success, 1 (and one line on stderr) on bad input."""
    p = argparse.ArgumentParser(prog="sft-compile", description=__doc__)
    p.add_argument("input", help=".mlir file (linalg or sft), or .py file defining `model` and "
                                 "`example_inputs`")
    p.add_argument("-o", "--output", help="output .vmfb (default: input name with .vmfb)")
    # Not argparse choices: an unknown target is one error line and exit code 1, like any other.
    p.add_argument("--target", default="host", help=f"one of {', '.join(target_names())} (default host; `sft targets` describes them)")
    p.add_argument("--plan", help="JSON plan file (default: empty plan, IREE decides)")
    p.add_argument("--search", choices=["none", "model", "verify"], default="none",
                   help="model: the cost model's best plan; verify: the best measured (default: "
                        "none, IREE decides)")
    # Not argparse choices either: an unknown value is sft's one-line error listing the allowed.
    p.add_argument("--precision", default="f32",
                   help=f"what --search may compute f32 contractions in: {', '.join(PRECISIONS)} "
                        "(bf16/f16: inputs rounded, f32 accumulation, where the model predicts a "
                        "gain; default f32, no rounding)")
    p.add_argument("--report", metavar="FILE", help="write the search report (.json: JSON, else text)")
    p.add_argument("--model", default="model", help="name of the model in a .py input")
    p.add_argument("--emit", choices=["vmfb", "sft", "linalg", "plan"], default="vmfb",
                   help="write the sft or lowered linalg text, or the plan JSON, instead of a .vmfb")
    args = p.parse_args(argv)
    return run_tool("sft-compile", lambda: _compile(args))


def _compile(args) -> int:
    target = get_target(args.target)
    check_precision(args.precision, args.search)
    suffix = {"vmfb": "vmfb", "sft": "sft.mlir", "linalg": "linalg.mlir", "plan": "plan.json"}
    output = args.output or str(Path(args.input).with_suffix("." + suffix[args.emit]))
    read_input(args.input)  # missing, unreadable or not UTF-8: one error naming the file
    plan = Plan.from_json(read_input(args.plan), args.plan) if args.plan else Plan()
    for path in (output, args.report):
        if path:
            _check_writable(path)
    if args.input.endswith(".py"):
        model, inputs = _load_python_model(args.input, args.model)
        program, module = prepare(model, inputs)
    else:
        program, module = prepare(Path(args.input))
    if args.search != "none" and not args.plan:
        plan, report = searched_plan(program, target, args.search, TuningDB(), args.precision)
        print(report.to_text(), file=sys.stderr)
        if args.report:
            write_output(args.report, report.to_json() if args.report.endswith(".json")
                         else report.to_text() + "\n")
    lowered, planned = lower(module, plan, target)
    sft_text = program.sft_text
    if args.emit == "plan":
        write_output(output, plan.to_json() + "\n")
    elif args.emit == "sft":
        write_output(output, sft_text)
    elif args.emit == "linalg":
        write_output(output, planned)
    else:
        artifact = compile_module(planned, target, plan.iree_flags)
        write_output(output, artifact.vmfb)
        run_on = f"; run it with --device={plan.driver}" if plan.driver else ""
        print(f"{output}: {artifact.dispatch_count} dispatches{run_on}", file=sys.stderr)
        if program.state:  # the module takes the model's state before its inputs
            params = str(Path(output).with_suffix(".state.npz"))
            with open(params, "wb") as f:
                np.savez(f, **program.state)
            print(f"{params}: its first {len(program.state)} arguments (the model's state, "
                  "in this order)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
