"""sft-hold-transposed: take a parameter in the layout its contractions read it in.

torch's `nn.Linear` keeps its weight [out, in] and multiplies by its transpose, so every
contraction of a torch model reads its weight across rows (a matmul with B transposed). IREE's
CPU kernels for that layout reach fewer FLOP/s than for B as [K, N], where wider register
blocks pay: on a 2-core Intel Xeon VM (AVX-512, one thread), a 32x256 by 256x1024 product took
175 us as torch's layout at IREE's tiles (no other tiles did better), 118 us read [K, N] with
an 8x32 register block; the 256-1024-256 MLP at batch 32, 485 us against 378-398
(docs/results.md, "Parameters held transposed").

A parameter of a compiled model is uploaded once and stays on the device, so it can be held
in that layout instead: transposed once when uploaded (`held_array`), back again when read
(`CompiledModel.state_dict`). `args` lists the entry function's arguments to hold, by position:
each must be a matrix whose every reader is a transposing sft.view (the contractions then read
the argument itself). Only the compiled model's state that no call replaces qualifies
(`fixed_state`): a value a call returns as new state would have to come back held too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..decisions.kind import SFT, DecisionKind, ints
from ..errors import IllegalPlan
from ..ir import tm
from .hold_packed import packed_array, unpacked_array
from .common import functions, op_ids_option, operation, static_shape, view_permutation


def _transposing_readers(func, position: int) -> list | None:
    """The views that read argument `position` of `func`, when it is a matrix read only
    through transposing views; else None."""
    args = func.regions[0].blocks[0].arguments
    if not 0 <= position < len(args):
        return None
    arg = args[position]
    shape = static_shape(arg)
    if shape is None or len(shape) != 2:
        return None
    views = [operation(use.owner) for use in arg.uses]
    if not views or any(view_permutation(v) != [1, 0] for v in views):
        return None
    return views


def hold_transposed(module, args: tuple[int, ...]) -> None:
    """Rewrite `module`'s entry to take each argument of `args` transposed (see the module
    docstring); an IllegalPlan where one is not a matrix read only through transposes."""
    if not args:
        return
    with module.context, tm.Location.unknown():
        # the entry's arguments: a split's join functions take none of those held
        # (`backend.parts.PartsLoaded` refuses a held argument a join reads)
        func = functions(module)[0]
        found = {a: _transposing_readers(func, a) for a in args}
        for position, views in found.items():
            if views is None:
                raise IllegalPlan(f"plan holds argument {position} transposed, which is not a "
                                  "matrix read only through transposes")
        block = func.regions[0].blocks[0]
        for position, views in found.items():
            arg = block.arguments[position]
            arg.set_type(views[0].results[0].type)
            for view in views:
                view.results[0].replace_all_uses_with(arg)
                view.erase()
        func_type = tm.FunctionType(tm.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = tm.TypeAttr.get(tm.FunctionType.get(
            [a.type for a in block.arguments], func_type.results))


def fixed_state(signature) -> tuple[int, ...]:
    """The positions of a compiled model's state (its first arguments) that no call replaces:
    those a plan may hold."""
    names = [name for name, _, _ in signature.state]
    replaced = {r.value for r in signature.results or () if r is not None and r.kind == "state"}
    return tuple(i for i, name in enumerate(names) if name not in replaced)


def holdable(module, candidates: tuple[int, ...]) -> tuple[int, ...]:
    """Those of the argument positions `candidates` that sft-hold-transposed can take."""
    with module.context:
        return tuple(a for a in candidates if _transposing_readers(functions(module)[0], a) is not None)


def holding(plan) -> dict[int, int]:
    """Argument position -> panel width of each argument `plan` holds: 0 where held
    transposed, n0 where also packed in panels of n0 columns (`passes.hold_packed`)."""
    panels = {position: n0 for position, _, n0 in plan.packed}
    if not set(panels) <= set(plan.held):
        raise IllegalPlan(f"plan.packed holds arguments {sorted(set(panels) - set(plan.held))} "
                          "packed that plan.held does not hold")
    return {a: panels.get(a, 0) for a in plan.held}


def held_array(array: np.ndarray, panel: int = 0) -> np.ndarray:
    """A held argument's value (as the user has it) as the module takes it: transposed, and
    packed in panels of `panel` columns where that is not 0."""
    held = np.ascontiguousarray(np.asarray(array).T)
    return packed_array(held, panel) if panel else held


def user_array(array: np.ndarray, panel: int = 0) -> np.ndarray:
    """`held_array`'s inverse: a held value as the module takes it, as the user has it."""
    return np.ascontiguousarray((unpacked_array(array) if panel else np.asarray(array)).T)


@dataclass(frozen=True)
class HoldTransposedPass:
    """Take entry arguments transposed where only transposes read them: {args=I,...}."""

    args: tuple[int, ...] = ()
    name = "sft-hold-transposed"

    @classmethod
    def from_options(cls, text: str) -> "HoldTransposedPass":
        """`args=I,I` (sft-opt -p 'sft-hold-transposed{args=0,2}')."""
        return cls(op_ids_option(cls.name, text, "args"))

    def __call__(self, module) -> None:
        hold_transposed(module, self.args)


KIND = DecisionKind(
    field="held", type="tuple[int, ...]", default=(),
    doc="state arguments (positions) held on the device transposed, in the layout their "
        "contractions read them in", parse=ints, stage=SFT, make_pass=HoldTransposedPass,
    describe=lambda args: f"parameters {list(args)} held transposed")
