"""Splitting MLIR-style text (pass pipelines, attribute bodies) at top-level commas, with no
MLIR bindings: the profile reader uses it on iree-compile's output as well."""

from __future__ import annotations


def split_top_level(text: str, opening: str = "([{", closing: str = ")]}") -> list[str]:
    """The comma-separated parts of `text` outside any brackets, stripped, empty ones dropped."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in opening
        depth -= ch in closing
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [p.strip() for p in parts + [current] if p.strip()]
