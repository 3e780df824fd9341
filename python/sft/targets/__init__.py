"""Where code runs. One `Target` object per name carries what every role needs (flags and
driver for the backend, hardware numbers for the cost model, the kernel config space for the
search). Adding a target is one module in this package that defines `TARGETS` (name -> a
function building its Target): every module here that does is found, the host's first."""

from __future__ import annotations

import importlib
import pkgutil

from ..errors import SftError
from .base import Target


def _factories() -> dict:
    """name -> factory over every module of this package that defines TARGETS (read from the
    package's folders at each call: a module added is found without a restart)."""
    names = sorted((m.name for m in pkgutil.iter_modules(__path__)), key=lambda n: (n != "host", n))
    found = {}
    for name in names:
        module = importlib.import_module(f"{__name__}.{name}")
        found.update(getattr(module, "TARGETS", {}))
    return found


def target_names() -> list[str]:
    """Every target name, the host first."""
    return list(_factories())


def get_target(target: Target | str) -> Target:
    """The Target of a name (built now: the host's reads its current calibration), or the
    Target given; an unknown name is an SftError listing the known ones."""
    if isinstance(target, Target):
        return target
    factories = _factories()
    make = factories.get(target) if isinstance(target, str) else None
    if make is None:
        raise SftError(f"unknown target {target!r} (known: {', '.join(factories)})")
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
