"""sft-opt: mlir-opt for sft. Reads MLIR, runs passes, prints MLIR."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

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


def decode(data: bytes, name: str) -> str:
    """Input bytes as UTF-8 text; anything else is an SftError at the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SftError(f"not UTF-8 text (byte 0x{data[err.start]:02x}); expected MLIR or Python "
                       "source", f"{name}:{line}:{col}") from None


def read_input(path: str) -> str:
    """A tool's input file ('-': stdin) as text; unreadable or not UTF-8 is an SftError."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise SftError(f"cannot read {path}: {exc.strerror or exc}") from None
    return decode(data, "<stdin>" if path == "-" else path)


def write_output(path: str, data: str | bytes) -> None:
    """Write a tool's output file ('-': stdout); failure is an SftError naming the file."""
    if path == "-":
        if isinstance(data, str):
            sys.stdout.write(data)
        else:
            sys.stdout.buffer.write(data)
        return
    try:
        if isinstance(data, str):
            Path(path).write_text(data)
        else:
            Path(path).write_bytes(data)
    except OSError as exc:
        raise SftError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_tool(prog: str, body: Callable[[], int]) -> int:
    """A tool's `main`: run `body`; an SftError (or an OSError or UnicodeDecodeError that it did
    not turn into one) is one line `prog: [file:line:col: ]error: ...` on stderr and exit code 1,
    never a traceback."""
    try:
        return body()
    except SftError as exc:
        message = str(exc)
    except UnicodeDecodeError as exc:
        message = f"error: not UTF-8 text ({exc.reason} at byte {exc.start})"
    except OSError as exc:
        message = f"error: {exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}"
    # One line, whatever the message holds (compiler output can span several).
    print(f"{prog}: " + "; ".join(filter(None, (l.strip() for l in message.splitlines()))),
          file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """sft-opt's entry point: 0 on success, 1 (and one line on stderr) on bad input."""
    args = _parser().parse_args(argv)
    filename = "<stdin>" if args.input == "-" else args.input

    def body() -> int:
        text = read_input(args.input)
        module = ir.parse(ir.sft_context(), text, filename)
        ir.verify(module, filename)
        steps = list(args.passes or []) + ([args.pass_pipeline] if args.pass_pipeline else [])
        for step in steps:
            run(module, step, filename)
        write_output(args.output, ir.print_module(module, generic=args.mlir_print_op_generic))
        return 0
    return run_tool("sft-opt", body)


if __name__ == "__main__":
    sys.exit(main())
