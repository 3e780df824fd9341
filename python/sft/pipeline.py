"""Textual pass pipelines that mix sft's Python passes with upstream MLIR passes.

`sft-raise,canonicalize,sft-lower` runs sft-raise, then upstream canonicalize through MLIR's
PassManager, then sft-lower. Options use MLIR's `{option=value}`
syntax; an sft pass that takes options builds itself from that text with `from_options`.
"""

from __future__ import annotations

from .errors import SftError
from .ir import run_pipeline
from .passes import PASSES


def split_pipeline(text: str) -> list[str]:
    """Split at commas that are not inside (), {} or []."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "({["
        depth -= ch in ")}]"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def run(module, pipeline: str | list[str], filename: str = "<input>") -> None:
    steps = split_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    upstream: list[str] = []

    def flush():
        if upstream:
            run_pipeline(module, ",".join(upstream), filename)
            upstream.clear()

    for step in steps:
        name = step.split("{", 1)[0]
        if name in PASSES:
            flush()
            cls = PASSES[name]
            if "{" in step:
                if not hasattr(cls, "from_options"):
                    raise SftError(f"pass '{name}' takes no options")
                cls.from_options(step.split("{", 1)[1].rstrip("}"))(module)
            else:
                cls()(module)
        elif name.startswith("sft-"):
            raise SftError(f"unknown sft pass '{name}' (known: {', '.join(sorted(PASSES))})")
        else:
            upstream.append(step)
    flush()
