"""A plan: every lowering decision for one program, as a frozen record that hashes and replays.

Ops are named by their position among the program's sft compute ops (the `sft.op` id that
sft-lower stamps on what it produces). An empty plan leaves every decision to IREE.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Union

Tree = Union[int, tuple["Tree", "Tree"]]  # an order: a leaf (operand number) or two subtrees


def as_tree(value) -> Tree:
    """An order tree from its JSON or text form (nested lists or tuples of operand numbers)."""
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (as_tree(value[0]), as_tree(value[1]))
    raise ValueError(f"not an order tree: {value!r}")


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes at each level IREE's CPU pipeline exposes, one entry per loop of the root op."""

    distribution: tuple[int, ...]
    vector_common_parallel: tuple[int, ...]
    vector_reduction: tuple[int, ...]
    pipeline: str = "DoubleTilingExpert"

    def attribute(self) -> str:
        """The #iree_codegen.compilation_info text that imposes this config on a linalg op."""
        def ints(xs):
            return "[" + ", ".join(map(str, xs)) + "]"
        return ("#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
                f"distribution = {ints(self.distribution)}, "
                f"vector_common_parallel = {ints(self.vector_common_parallel)}, "
                f"vector_reduction = {ints(self.vector_reduction)}>, "
                "translation_info = #iree_codegen.translation_info<pipeline = "
                f"#iree_cpu.pipeline<{self.pipeline}>>>")


@dataclass(frozen=True)
class Plan:
    """Decisions in the order they apply; each names ops by their position among the sft ops
    of the program as the decisions before it left it.

    expand: contractions run over the batch dims their operands were collapsed from
    (passes/expand_batch.py); orders: (op id, order) for chains of contractions evaluated in
    another order than written (space/chains.py); groups: the fusion partition (ops in no group are left to
    IREE's own fusion); tiles: (op id, TileConfig) for kernel roots; flags: extra iree-compile
    options; driver: the IREE runtime driver to run on ("" for the target's own)."""

    expand: tuple[int, ...] = ()
    orders: tuple[tuple[int, Tree], ...] = ()
    groups: tuple[tuple[int, ...], ...] = ()
    tiles: tuple[tuple[int, TileConfig], ...] = ()
    flags: tuple[str, ...] = field(default=())
    driver: str = ""

    @property
    def is_empty(self) -> bool:
        return not (self.expand or self.orders or self.groups or self.tiles or self.flags or self.driver)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Plan":
        data = json.loads(text)
        return Plan(
            expand=tuple(int(i) for i in data.get("expand", ())),
            orders=tuple((int(i), as_tree(o)) for i, o in data.get("orders", ())),
            groups=tuple(tuple(g) for g in data.get("groups", ())),
            tiles=tuple((int(i), TileConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                for k, v in cfg.items()}))
                        for i, cfg in data.get("tiles", ())),
            flags=tuple(data.get("flags", ())),
            driver=data.get("driver", ""),
        )

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]
