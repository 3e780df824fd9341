"""The chain-order decision's record: an evaluation order of a chain of contractions, as a binary
tree over the chain's operands (a leaf is an operand number)."""

from __future__ import annotations

from typing import Union

Tree = Union[int, tuple["Tree", "Tree"]]  # an order: a leaf (operand number) or two subtrees


def as_tree(value) -> Tree:
    """An order tree from its JSON or text form (nested lists or tuples of operand numbers)."""
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (as_tree(value[0]), as_tree(value[1]))
    raise ValueError(f"not an order tree: {value!r}")
