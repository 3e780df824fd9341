"""A decision kind: one field of a `Plan`, how its JSON reads, what applies it, its report line.

Each kind is declared once, as `KIND = DecisionKind(...)` in the module that applies it (a pass:
passes/expand_batch.py, reassociate.py, low_precision.py, apply_plan.py) or, for what only
iree-compile and the runtime read (flags, driver, as_imported), in plan.py; `plan.KINDS` lists
them in the order they apply, and the `Plan` record, its JSON, `program.lower` and the search's
report line are all built from that list (as tinygrad's `Opt` kinds and `apply_opt`). Adding a
kind is its module and one entry of `plan.KINDS`.

The parse helpers below read the JSON forms kinds share; each raises ValueError or TypeError
naming the key (`what`), which `Plan.from_json` turns into one SftError line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

SFT, IREE, COMPILE = "sft", "iree", "compile"  # where a kind applies (`DecisionKind.stage`)


@dataclass(frozen=True)
class DecisionKind:
    """field: the Plan field (and JSON key); type: its annotation; default: the value that
    leaves the decision to IREE; doc: what it decides, for Plan's docstring; parse: JSON data
    and the key's name -> the value; stage: SFT (a pass on the sft module before sft-lower, in
    `plan.KINDS` order), IREE (a pass on the lowered linalg in IREE's context) or COMPILE (read
    by the backend: no pass); make_pass: value -> the pass applying it (SFT and IREE stages);
    describe: value -> the report's words for it (None: the report says nothing of it)."""

    field: str
    type: str
    default: object
    doc: str
    parse: Callable[[object, str], object]
    stage: str
    make_pass: Callable[[object], Callable] | None = None
    describe: Callable[[object], str] | None = None


def boolean(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be true or false, not {json.dumps(value)}")
    return value


def string(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {json.dumps(value)}")
    return value


def strings(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise TypeError(f"{what} must be a list of strings, not {json.dumps(value)}")
    return tuple(value)


def ints(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(x) is int for x in value):
        raise TypeError(f"{what} must be a list of integers, not {json.dumps(value)}")
    return tuple(value)


def pairs(value, what: str) -> list[tuple[int, object]]:
    """[[op id, value], ...] as (op id, value) pairs."""
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int for p in value):
        raise TypeError(f"{what} must be a list of [op id, value] pairs, not {json.dumps(value)}")
    return [(p[0], p[1]) for p in value]
