"""IREE's own legality check of a GPU config, run on a program whose contraction carries it.

How it works in IREE 3.13 (found by trying; the flag's help says no more than "emit SMT
pipeline constraints"):

1. The program WITHOUT its compilation_info goes through `iree-compile
   --compile-to=executable-configurations --iree-codegen-emit-pipeline-constraints` with the
   target's flags. IREE configures the root op itself, marks it `root_op =
   #iree_codegen.root_op<set = N>`, and emits beside it one `iree_codegen.smt.constraints` op per
   pipeline it could use (TileAndFuse and VectorDistribute), whose knobs (wg_0, sg_1, red_2,
   mma_idx, wg_size_x, prefetch_num_stages, ...) are SMT values with asserts over them. With the
   config left on the op it emits nothing (IREE does not configure an op that has one).
2. On that output the root op's lowering_config and the dispatch function's translation_info
   are replaced with the config's own.
3. `iree-opt --pass-pipeline=builtin.module(hal.executable(hal.executable.variant(
   builtin.module(func.func(iree-codegen-verify-smt-constraints)))))` (it runs on functions
   only) reads the knob values from the config, takes the constraint set of its pipeline and
   evaluates each assert; a violated one is an `error: pipeline constraints violated` followed by
   one `note:` per assert, e.g. `dim_0 must be divisible by wg_0 (256 % 48 == 0)`.

What it checks: tiles dividing the (intrinsic-aligned) extents, tiles multiples of the intrinsic
and of subgroup x intrinsic, the 512 VGPR bound on tiles, reduction step bounds, workgroup
memory of the promoted operands, the subgroup size, prefetch_num_stages == 2, and for
VectorDistribute promoted tiles divisible by the thread count and a thread count no larger than
a tile side.

What it does not check (hence `space/gpu.py`'s own rules, and `Verdict.checked`):
- asserts over values the config does not fix (`smt.declare_fun`: subgroups per dimension, so
  the thread count, `wg_size_x == total_threads`, `sg_num <= 10`) are skipped: a workgroup_size
  of 256 where the tiles need 128 threads passes;
- an mma_kind outside the knob's one_of list (another vendor's, or NV_WMMA) passes, and so does
  an f32-accumulating intrinsic on an f16 result, which then fails to compile;
- IREE emits no constraints for TileAndFuse SIMT (`thread` tiles: f32 on CUDA) nor for any SPIR-V
  pipeline (Vulkan): nothing to check there;
- a config of another form than the emitted template (SIMT where IREE chose an intrinsic, a
  VectorDistribute config without promotion_types) is "failed to extract SMT knob values":
  unchecked;
- for a batched contraction with an intrinsic, the emission itself crashes (a segfault in
  `assertDivisible`): unchecked; check the config of one batch slice instead;
- IREE's own VectorDistribute default (f16 on gfx942) violates its own constraints
  (prefetch_num_stages is unstated, and 256 threads exceed both 64-wide tile sides).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass

from ..errors import SftError
from ..paths import scratch_dir
from .iree import _iree_compile, compile_timeout
from .process import exit_text, run_group

OPT_TOOL_ENV = "SFT_IREE_OPT"
VERIFY_PIPELINE = ("builtin.module(hal.executable(hal.executable.variant(builtin.module("
                   "func.func(iree-codegen-verify-smt-constraints)))))")
_INFO = "compilation_info = #iree_codegen.compilation_info<"
_ROOT = re.compile(r"root_op = #iree_codegen\.root_op<set = \d+>")


@dataclass(frozen=True)
class Verdict:
    """IREE's answer for one config: `checked` False when it could not check it (`reason`
    says why); `violations` the asserts it found violated, as IREE words them."""

    checked: bool
    violations: tuple[str, ...] = ()
    reason: str = ""


def _closing(text: str, start: int) -> int:
    """Index just past the `>` closing the `<` at `text[start]` (`->` is no bracket)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">" and text[i - 1] != "-":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unclosed attribute at {text[start:start + 60]!r}")


def split_config(program_text: str) -> tuple[str, str, str]:
    """(program without the compilation_info, its lowering_config, its translation_info). The
    program must carry exactly one compilation_info (a ValueError otherwise)."""
    count = program_text.count(_INFO)
    if count != 1:
        raise ValueError(f"the program carries {count} compilation_info attributes; one expected")
    start = program_text.index(_INFO)
    end = _closing(program_text, start + len(_INFO) - 1)
    body = program_text[start + len(_INFO):end - 1]
    split = body.index(", translation_info = ")
    lowering = body[:split].removeprefix("lowering_config = ").strip()
    translation = body[split + len(", translation_info = "):].strip()
    # Drop the attribute and what held it: ` attrs = {compilation_info = X}` or one entry of a
    # dictionary.
    before, after = program_text[:start], program_text[end:]
    if before.endswith("attrs = {") and after.startswith("}"):
        before, after = before[:-len("attrs = {")].rstrip(" "), after[1:]
    elif before.rstrip().endswith(","):
        before = before.rstrip()[:-1]
    elif after.lstrip().startswith(","):
        after = after.lstrip()[1:].lstrip()
    return before + after, lowering, translation


def _iree_opt() -> str:
    """iree-opt: the one iree-base-compiler ships, unless $SFT_IREE_OPT names another."""
    override = os.environ.get(OPT_TOOL_ENV, "").strip()
    if override:
        return override
    from iree.compiler.tools.binaries import find_tool

    try:
        return find_tool("iree-opt")
    except ValueError as e:
        raise SftError(f"iree-opt not found: {str(e).splitlines()[0]}") from None


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return run_group(cmd, compile_timeout())
    except subprocess.TimeoutExpired:
        raise SftError(f"{what} timed out") from None
    except OSError as e:
        raise SftError(f"{what} could not be started: {e.strerror or e}") from None


@functools.lru_cache(maxsize=64)
def emitted_constraints(program_text: str, flags: tuple[str, ...]) -> str | None:
    """IREE's configured program with its constraints (step 1), for a program without a
    compilation_info; None when the emission crashes (batched contractions with an intrinsic).
    Cached: every candidate config of a kernel is checked against the same constraints."""
    with scratch_dir() as tmp:
        src, out = tmp / "in.mlir", tmp / "out.mlir"
        src.write_text(program_text)
        proc = _run([_iree_compile(), str(src), "-o", str(out), *flags,
                     "--compile-to=executable-configurations",
                     "--iree-codegen-emit-pipeline-constraints"], "constraint emission")
        if proc.returncode < 0 or proc.returncode > 128:
            return None
        if proc.returncode != 0:
            first = next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr[:300])
            raise SftError(f"iree-compile failed emitting constraints: {first}")
        return out.read_text()


def _substitute(configured: str, lowering: str, translation: str) -> str:
    """The configured program with the root op's config and its function's translation info
    replaced (step 2)."""
    root = _ROOT.search(configured)
    line_start = configured.rfind("\n", 0, root.start()) + 1
    at = configured.index("lowering_config = ", line_start) + len("lowering_config = ")
    configured = configured[:at] + lowering + configured[_closing(configured, configured.index("<", at)):]
    func = configured.rfind("func.func @", 0, line_start)
    at = configured.index("translation_info = ", func) + len("translation_info = ")
    return configured[:at] + translation + configured[_closing(configured, configured.index("<", at)):]


def verify_config(program_text: str, flags: tuple[str, ...]) -> Verdict:
    """IREE's verdict on the one compilation_info of `program_text` for the target `flags`
    (its iree-compile flags; a target named by a device attribute carries it in the text)."""
    program, lowering, translation = split_config(program_text)
    configured = emitted_constraints(program, tuple(flags))
    if configured is None:
        return Verdict(False, reason="iree-compile crashed emitting constraints (IREE 3.13 does "
                                     "for batched contractions with an intrinsic)")
    if "iree_codegen.smt.constraints" not in configured or not _ROOT.search(configured):
        return Verdict(False, reason="IREE emits no constraints for this op on this target "
                                     "(SIMT and SPIR-V pipelines have none)")
    with scratch_dir() as tmp:
        src = tmp / "configured.mlir"
        src.write_text(_substitute(configured, lowering, translation))
        proc = _run([_iree_opt(), str(src), f"--pass-pipeline={VERIFY_PIPELINE}",
                     "--mlir-print-op-on-diagnostic=false", "-o", str(tmp / "out.mlir")],
                    "constraint verification")
    if proc.returncode < 0:
        return Verdict(False, reason=f"iree-opt crashed ({exit_text(proc.returncode)})")
    if proc.returncode == 0:
        return Verdict(True)
    if "failed to extract SMT knob values" in proc.stderr:
        return Verdict(False, reason="the config's form does not match IREE's constraint template")
    notes = [line.split("note: ", 1)[1] for line in proc.stderr.splitlines() if "note: " in line]
    if notes:
        return Verdict(True, tuple(notes))
    # Anything else (a config IREE cannot parse) is a violation in IREE's own words.
    errors = [line.split("error: ", 1)[1] for line in proc.stderr.splitlines() if "error: " in line]
    return Verdict(True, tuple(errors or [proc.stderr.strip()[:300]]))


def check_config(program_text: str, flags: tuple[str, ...]) -> list[str]:
    """The constraints IREE finds the program's config violates, as lines ([] when it passes,
    and when IREE cannot check it: see `verify_config` and this module's docstring)."""
    return list(verify_config(program_text, flags).violations)
