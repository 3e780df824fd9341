"""A plan: every lowering decision for one program, as a frozen record that hashes and replays.

Ops are named by their position among the program's sft compute ops (the `sft.op` id that
sft-lower stamps on what it produces). An empty plan leaves every decision to IREE.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Union

from .decisions import KernelConfig, config_from_dict
from .errors import SftError

Tree = Union[int, tuple["Tree", "Tree"]]  # an order: a leaf (operand number) or two subtrees


def as_tree(value) -> Tree:
    """An order tree from its JSON or text form (nested lists or tuples of operand numbers)."""
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (as_tree(value[0]), as_tree(value[1]))
    raise ValueError(f"not an order tree: {value!r}")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Decisions in the order they apply; each names ops by their position among the sft ops
    of the program as the decisions before it left it.

    expand: contractions run over the batch dims their operands were collapsed from
    (passes/expand_batch.py); orders: (op id, order) for chains of contractions evaluated in
    another order than written (space/chains.py); groups: the fusion partition (ops in no group are left to
    IREE's own fusion); tiles: (op id, config) for kernel roots (a decisions.TileConfig on a
    CPU, a decisions.GpuConfig on a GPU); flags: extra iree-compile
    options; driver: the IREE runtime driver to run on ("" for the target's own);
    low_precision: (op id, "bf16" | "f16") for f32 contractions whose inputs are rounded to that
    type, accumulation and result staying f32 (passes/low_precision.py; only where the user
    allowed it with `precision=`). It applies after expand and orders and before groups and
    tiles (it inserts one cast op per f32 input before its contraction, so later ids count
    them).
    as_imported: compile the front end's linalg as it came (IREE alone: sft's raise and lower
    skipped; only flags and driver apply), which verify always times, so that sft's own
    lowering never costs the user."""

    expand: tuple[int, ...] = ()
    orders: tuple[tuple[int, Tree], ...] = ()
    groups: tuple[tuple[int, ...], ...] = ()
    tiles: tuple[tuple[int, KernelConfig], ...] = ()
    flags: tuple[str, ...] = field(default=())
    driver: str = ""
    low_precision: tuple[tuple[int, str], ...] = ()
    as_imported: bool = False

    @property
    def is_empty(self) -> bool:
        return not (self.expand or self.orders or self.groups or self.tiles or self.flags
                    or self.driver or self.low_precision or self.as_imported)

    def to_json(self) -> str:
        data = asdict(self)
        for key in ("low_precision", "as_imported"):  # unset: read (and hashed) as before the field
            if not data[key]:
                del data[key]
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def from_json(text: str, source: str | None = None) -> "Plan":
        """The plan `to_json` wrote. Anything else (bad JSON, a key Plan does not have, a value of
        the wrong type) is an SftError naming the key; `source` (a file name) says where."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SftError(f"plan is not valid JSON: {err.msg}",
                           f"{source or '<plan>'}:{err.lineno}:{err.colno}") from None
        try:
            return _plan_of(data)
        except (ValueError, TypeError) as err:
            raise SftError(f"invalid plan: {err}", source) from None

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be true or false, not {json.dumps(value)}")
    return value


def _ints(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(x) is int for x in value):
        raise TypeError(f"{what} must be a list of integers, not {json.dumps(value)}")
    return tuple(value)


def _pairs(value, what: str) -> list[tuple[int, object]]:
    """[[op id, value], ...] as (op id, value) pairs."""
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int for p in value):
        raise TypeError(f"{what} must be a list of [op id, value] pairs, not {json.dumps(value)}")
    return [(p[0], p[1]) for p in value]


LOW_PRECISION_TYPES = ("bf16", "f16")


def _low_precision(value) -> tuple[tuple[int, str], ...]:
    """[[op id, "bf16" | "f16"], ...] as pairs; another type is an error naming the entry."""
    pairs = _pairs(value, "low_precision")
    for i, (_, dtype) in enumerate(pairs):
        if dtype not in LOW_PRECISION_TYPES:
            raise ValueError(f"low_precision[{i}]: {json.dumps(dtype)} is not a low-precision "
                             f"input type (known: {', '.join(LOW_PRECISION_TYPES)})")
    return tuple(pairs)


def _plan_of(data) -> Plan:
    """A Plan from parsed JSON, every key and type checked (ValueError or TypeError naming it)."""
    known = {f.name for f in fields(Plan)}
    if not isinstance(data, dict):
        raise TypeError(f"a plan is a JSON object with keys {sorted(known)}, not {json.dumps(data)[:60]}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
    groups = data.get("groups", [])
    if not isinstance(groups, list):
        raise TypeError(f"groups must be a list of lists of op ids, not {json.dumps(groups)}")
    flags, driver = data.get("flags", []), data.get("driver", "")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise TypeError(f"flags must be a list of strings, not {json.dumps(flags)}")
    if not isinstance(driver, str):
        raise TypeError(f"driver must be a string, not {json.dumps(driver)}")
    orders = []
    for i, (op, tree) in enumerate(_pairs(data.get("orders", []), "orders")):
        try:
            orders.append((op, as_tree(tree)))
        except ValueError:
            raise ValueError(f"orders[{i}]: not an order tree: {json.dumps(tree)}") from None
    return Plan(
        expand=_ints(data.get("expand", []), "expand"),
        orders=tuple(orders),
        groups=tuple(_ints(g, f"groups[{i}]") for i, g in enumerate(groups)),
        tiles=tuple((op, config_from_dict(cfg, f"tiles[{i}]"))
                    for i, (op, cfg) in enumerate(_pairs(data.get("tiles", []), "tiles"))),
        flags=tuple(flags),
        driver=driver,
        low_precision=_low_precision(data.get("low_precision", [])),
        as_imported=_bool(data.get("as_imported", False), "as_imported"),
    )
