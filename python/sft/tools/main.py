"""sft: one command for sft's tools (`sft compile ...`, `sft doctor`, ...).

Each subcommand hands the rest of the command line to the tool of that name (`sft compile X` is
`sft-compile X`); the tools are imported only when called, so `sft --help` and `sft targets`
stay quick and one tool's missing dependency never breaks another.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .opt import run_tool

# name -> (module under sft.tools, one line for --help)
COMMANDS = {
    "compile": ("compile", "compile an .mlir file or a Python model to an IREE .vmfb"),
    "opt": ("opt", "run sft and MLIR passes on an MLIR file (like mlir-opt)"),
    "bench": ("bench", "time the model suite: sft against IREE's defaults and PyTorch"),
    "demo": ("demo", "compile bundled models, check them against PyTorch, print speed-ups"),
    "calibrate": ("calibrate", "measure this host's numbers for the cost model and store them"),
    "fuzz": ("fuzz", "differential fuzzing of sft against numpy"),
    "doctor": ("doctor", "check that each device is as fast as the cost model predicts"),
    "db": ("db", "export the tuning database to a file, or merge one in (share tuning)"),
    "gpu-check": ("gpu_check", "compile the suite for a GPU here, time it where the GPU is"),
    "targets": (None, "list the targets sft compiles for"),
}


def usage() -> str:
    """The text of `sft --help`: every subcommand with one line."""
    width = max(map(len, COMMANDS))
    lines = ["usage: sft <command> [arguments...]", "", "sft, a search-based tensor compiler.",
             "", "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    lines += ["", "`sft <command> --help` describes a command's arguments."]
    return "\n".join(lines)


def targets(argv: list[str]) -> int:
    """`sft targets`: one line per target."""
    p = argparse.ArgumentParser(prog="sft targets", description=COMMANDS["targets"][1])
    p.parse_args(argv)

    def body() -> int:
        from ..targets import describe_targets  # the targets read the host; only when asked

        print(describe_targets())
        return 0
    return run_tool("sft targets", body)


def main(argv: list[str] | None = None) -> int:
    """sft's entry point: the subcommand's exit status; 1 and one line on stderr for a missing
    or unknown subcommand."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if not argv or argv[0].startswith("-"):
        what = f"unknown option {argv[0]!r}" if argv else "no command given"
        print(f"sft: error: {what}; expected one of: {', '.join(COMMANDS)} (see sft --help)",
              file=sys.stderr)
        return 1
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"sft: error: unknown command {name!r}; expected one of: {', '.join(COMMANDS)} "
              "(see sft --help)", file=sys.stderr)
        return 1
    module = COMMANDS[name][0]
    if module is None:
        return targets(rest)
    return importlib.import_module(f"{__package__}.{module}").main(rest)


if __name__ == "__main__":
    sys.exit(main())
