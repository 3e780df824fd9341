"""sft-opt: mlir-opt for sft. Reads MLIR, runs passes, prints MLIR."""

from __future__ import annotations

import argparse
import sys

from .. import ir
from ..errors import SftError
from ..passes import PASSES
from ..pipeline import run


def _parser() -> argparse.ArgumentParser:
    passes = "\n".join(f"  {name:<17} {cls.__doc__.strip().splitlines()[0]}"
                       for name, cls in sorted(PASSES.items()))
    p = argparse.ArgumentParser(
        prog="sft-opt", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run sft and upstream MLIR passes on an MLIR file (like mlir-opt).",
        epilog=f"sft passes:\n{passes}\n\nAny upstream MLIR pass name (canonicalize, cse, "
               "func.func(linalg-generalize-named-ops), ...) can appear in --pass-pipeline.")
    p.add_argument("input", nargs="?", default="-", help="input .mlir file ('-' for stdin)")
    p.add_argument("-o", "--output", default="-", help="output file ('-' for stdout)")
    p.add_argument("-p", "--pass-pipeline", default="",
                   help="comma-separated passes, e.g. 'sft-raise,canonicalize,sft-lower'")
    for name in sorted(PASSES):
        p.add_argument(f"--{name}", action="append_const", const=name, dest="passes",
                       help=f"run {name}")
    p.add_argument("--mlir-print-op-generic", action="store_true", help="print the generic form")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    filename = "<stdin>" if args.input == "-" else args.input
    try:
        try:
            text = sys.stdin.read() if args.input == "-" else open(args.input).read()
        except OSError as exc:
            raise SftError(f"cannot read {args.input}: {exc.strerror}") from None
        module = ir.parse(ir.sft_context(), text, filename)
        ir.verify(module, filename)
        steps = list(args.passes or []) + ([args.pass_pipeline] if args.pass_pipeline else [])
        for step in steps:
            run(module, step, filename)
        out = ir.print_module(module, generic=args.mlir_print_op_generic)
    except SftError as exc:
        print(f"sft-opt: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(out)
    else:
        with open(args.output, "w") as f:
            f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
