"""Where code runs. One `Target` object per name carries what every role needs (flags and
driver for the backend, hardware numbers for the cost model, the kernel config space for the
search); adding a target is one module here, listed in `_MODULES`."""

from __future__ import annotations

from ..errors import SftError
from . import cuda, host, rocm, vulkan
from .base import Target

_MODULES = (host, cuda, rocm, vulkan)
_FACTORIES = {name: make for module in _MODULES for name, make in module.TARGETS.items()}


def target_names() -> list[str]:
    """Every target name, the host first."""
    return list(_FACTORIES)


def get_target(target: Target | str) -> Target:
    """The Target of a name (built now: the host's reads its current calibration), or the
    Target given; an unknown name is an SftError listing the known ones."""
    if isinstance(target, Target):
        return target
    make = _FACTORIES.get(target) if isinstance(target, str) else None
    if make is None:
        raise SftError(f"unknown target {target!r} (known: {', '.join(target_names())})")
    return make()


def describe_targets() -> str:
    """One line per target (what `sft targets` prints): name, what it is, driver, searched."""
    lines = []
    for name in target_names():
        t = get_target(name)
        searched = ("kernel configs searched" if t.searched_codegen is not None else
                    "IREE's kernel configs" + (" (configs drawn for fuzzing and gpu-check only)"
                                               if t.codegen is not None else ""))
        lines.append(f"{name:<14} {t.about}; driver {t.driver}; {searched}; "
                     f"{len(t.options)} backend option set{'s' * (len(t.options) != 1)}")
    return "\n".join(lines)


__all__ = ["Target", "get_target", "target_names", "describe_targets"]
