"""A plan: every lowering decision for one program, as a frozen record that hashes and replays.

Its fields are the decision kinds of `KINDS`, in the order they apply, each declared by the
module that applies it (`decisions.kind.DecisionKind`): adding a kind is that module and one
entry here. Ops are named by their position among the program's sft compute ops
(`passes.common.compute_ops`, the `sft.op` id sft-lower stamps), as the kinds before it left
the program. An empty plan leaves every decision to IREE. `Plan` takes keywords only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import field, make_dataclass

from .decisions.kind import COMPILE, DecisionKind, boolean, string, strings
from .errors import SftError
from .passes import (apply_plan, expand_batch, hold_packed, hold_transposed, im2col, low_precision, orient,
                     reassociate, split_batch, split_reduction)

FLAGS = DecisionKind(field="flags", type="tuple[str, ...]", default=(),
                     doc="extra iree-compile options", parse=strings, stage=COMPILE)
DRIVER = DecisionKind(field="driver", type="str", default="",
                      doc="the IREE runtime driver to run on (\"\": the target's own)",
                      parse=string, stage=COMPILE)
AS_IMPORTED = DecisionKind(
    field="as_imported", type="bool", default=False,
    doc="compile the front end's linalg as it came (IREE alone: sft's raise and lower skipped; "
        "only flags and driver apply), which verify always times, so that sft's own lowering "
        "never costs the user", parse=boolean, stage=COMPILE)

KINDS: tuple[DecisionKind, ...] = (
    split_batch.KIND, split_batch.WEIGHT_KIND, im2col.KIND, split_reduction.KIND,  # on the sft
    hold_transposed.KIND, orient.KIND, expand_batch.KIND, reassociate.KIND,   # program, in
    low_precision.KIND,                                                       # order
    apply_plan.TILES, hold_packed.KIND, apply_plan.GROUPS,    # on the lowered linalg
    FLAGS, DRIVER, AS_IMPORTED,                               # read by iree-compile and the runtime
)
_BY_FIELD = {k.field: k for k in KINDS}


class _PlanMethods:
    @property
    def is_empty(self) -> bool:
        return all(getattr(self, k.field) == k.default for k in KINDS)

    def passes(self, stage: str) -> list:
        """The passes that apply this plan's decisions of `stage` (decisions.kind.SFT or IREE),
        in order; none for a decision left at its default."""
        return [k.make_pass(getattr(self, k.field)) for k in KINDS
                if k.stage == stage and getattr(self, k.field) != k.default]

    @property
    def iree_flags(self) -> tuple[str, ...]:
        """The iree-compile options this plan compiles with: its flags, and IREE's
        micro-kernels off where it holds weights packed (`passes.hold_packed`)."""
        return self.flags + ((hold_packed.UKERNELS_OFF,) if self.packed else ())

    def describe(self) -> list[str]:
        """The report's words for each decision the plan takes that has any."""
        return [k.describe(getattr(self, k.field)) for k in KINDS
                if k.describe is not None and getattr(self, k.field) != k.default]

    def to_json(self) -> str:
        """The decisions taken (those at their default left out), canonical: sorted keys."""
        data = {k.field: _data(getattr(self, k.field)) for k in KINDS
                if getattr(self, k.field) != k.default}
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


Plan = make_dataclass(
    "Plan", [(k.field, k.type, field(default=k.default)) for k in KINDS], bases=(_PlanMethods,),
    frozen=True, kw_only=True)
Plan.__module__ = __name__  # pickled by name, as a class written here would be
Plan.__doc__ = ("Every lowering decision for one program, keywords only; each field is a "
                "decision kind (`KINDS`, in the order they apply):\n\n" +
                "\n".join(f"    {k.field}: {k.doc}." for k in KINDS))


def _data(value):
    """A decision's value as JSON data: tuples as lists, records by their `to_dict`."""
    if isinstance(value, (tuple, list)):
        return [_data(v) for v in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


def _plan_of(data) -> Plan:
    """A Plan from parsed JSON, every key and type checked (ValueError or TypeError naming it)."""
    if not isinstance(data, dict):
        raise TypeError(f"a plan is a JSON object with keys {sorted(_BY_FIELD)}, not {json.dumps(data)[:60]}")
    unknown = sorted(set(data) - set(_BY_FIELD))
    if unknown:
        raise ValueError(f"unknown key '{unknown[0]}' (known: {', '.join(sorted(_BY_FIELD))})")
    return Plan(**{key: _BY_FIELD[key].parse(value, key) for key, value in data.items()})
