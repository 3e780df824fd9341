"""The text of a fuzzed program's functions: all of it in @main, or its first ops in a
private function @main calls. `b` is the programs.Builder that grew it."""

from __future__ import annotations

import re

from .values import Value, ttype


def function_text(b, name: str, lines: list[str], outs: list[Value], private: bool = False) -> str:
    """`func.func @name` over every input, computing `lines` and returning `outs`."""
    sig = ", ".join(f"{a.name}: {ttype(a.shape, b.dtype)}" for a in b.args)
    res = ", ".join(ttype(v.shape, b.dtype) for v in outs)
    return (f"func.func {'private ' * private}@{name}({sig}) -> ({res}) {{\n" +
            "\n".join(b.head + lines) + f"\n  return {', '.join(v.name for v in outs)} : {res}\n}}\n")


def outlined(b, split: int, outs: list[Value]) -> str:
    """The program with its ops before entry `split` in a private function @part that @main
    calls (op ids count the callee's ops first, then @main's): what hand-written and
    exported MLIR often holds, and where two scopes of op ids once disagreed."""
    by_name = {v.name: v for v in b.values}
    defined = [m.group(1) for m in (re.match(r"^  (%\w+) = ", e) for e in b.lines[:split]) if m]
    later = "\n".join(b.lines[split:]) + " " + " ".join(v.name for v in outs)
    passed = [by_name[n] for n in defined if n in by_name and re.search(re.escape(n) + r"\b", later)]
    if not passed:
        return function_text(b, "main", b.lines, outs)
    b.features.add("private-callee")
    args = ", ".join(a.name for a in b.args)
    arg_types = ", ".join(ttype(a.shape, b.dtype) for a in b.args)
    res = ", ".join(ttype(v.shape, b.dtype) for v in passed)
    call = (f"  {', '.join(v.name for v in passed)} = func.call @part({args}) : "
            f"({arg_types}) -> ({res})")
    return (function_text(b, "part", b.lines[:split], passed, private=True)
            + function_text(b, "main", [call, *b.lines[split:]], outs))
