"""Textual pass pipelines that mix sft's Python passes with upstream MLIR passes.

`sft-raise,canonicalize,sft-lower` runs sft-raise, then upstream canonicalize through MLIR's
PassManager, then sft-lower. Options use MLIR's `{option=value}`
syntax; an sft pass that takes options builds itself from that text with `from_options`.
"""

from __future__ import annotations

import re

from . import ir
from .errors import SftError
from .ir import run_pipeline
from .passes import PASSES
from .syntax import split_top_level

_UNREGISTERED = re.compile(r"'([^']+)' does not refer to a registered pass or pass pipeline")


def _known() -> str:
    return (f"sft passes: {', '.join(sorted(PASSES))}; any other name must be an upstream MLIR "
            "pass or pipeline, e.g. canonicalize, cse, func.func(linalg-generalize-named-ops)")


def check_upstream(module, step: str) -> None:
    """Parse one upstream pipeline step before running anything: a name MLIR does not know, or
    options it rejects, is an SftError saying which (MLIR's own message is often empty)."""
    with module.context:
        try:
            ir.tm_passmanager.PassManager.parse(f"builtin.module({step})")
        except ValueError as err:
            unregistered = _UNREGISTERED.search(str(err))
            if unregistered:
                raise SftError(f"unknown pass '{unregistered.group(1)}' ({_known()})") from None
            detail = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
            detail = detail.removeprefix("<Pass-Options-Parser>: ")
            raise SftError(f"bad pass '{step}': {detail or 'MLIR cannot parse it'}") from None


def split_pipeline(text: str) -> list[str]:
    """Split at commas that are not inside (), {} or []."""
    return split_top_level(text)


def run(module, pipeline: str | list[str], filename: str = "<input>") -> None:
    """Run a pipeline of sft and upstream passes on `module`; bad pass names are found first."""
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
            check_upstream(module, step)
            upstream.append(step)
    flush()
