"""Whole-program backend options: how IREE partitions the program into dispatches and lays out
contraction operands, whether it calls its micro-kernels, and which runtime driver executes it.

Each is a real choice whose best value depends on the workload: IREE's aggressive fusion forms
fewer, larger dispatches (layernorm's two reductions become one), which its codegen does not
always handle as well; data tiling packs operands into cache-friendly tiles at the price of
pack/unpack work; IREE's micro-kernels replace generated contraction code; the parallel executor (`local-task`) spreads work over cores at a fixed wake-up
cost per call, while `local-sync` runs inline on the caller's thread. Index 0 is IREE's default.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

DATA_TILING = "--iree-opt-data-tiling"
UKERNELS = "--iree-llvmcpu-enable-ukernels=all"
AGGRESSIVE_FUSION = "--iree-dispatch-creation-enable-aggressive-fusion"
SERIAL_DRIVER = "local-sync"


@dataclass(frozen=True)
class ModuleOptions:
    data_tiling: bool = False
    ukernels: bool = False
    serial: bool = False  # run on local-sync instead of the target's parallel driver
    fusion: bool = False  # IREE's aggressive fusion partition instead of its default one

    @property
    def flags(self) -> tuple[str, ...]:
        return self.formation_flags + (UKERNELS,) * self.ukernels

    @property
    def formation_flags(self) -> tuple[str, ...]:
        """The flags that change which dispatches IREE forms (the program's IREE profile)."""
        return (AGGRESSIVE_FUSION,) * self.fusion + (DATA_TILING,) * self.data_tiling

    @property
    def driver(self) -> str:
        return SERIAL_DRIVER if self.serial else ""

    @property
    def keeps_tiles(self) -> bool:
        """Tile configs apply to IREE's default contraction codegen only: data tiling and
        micro-kernels replace it."""
        return not (self.data_tiling or self.ukernels)

    def describe(self) -> str:
        parts = [name for name, on in (("aggressive-fusion", self.fusion),
                                       ("data-tiling", self.data_tiling),
                                       ("ukernels", self.ukernels)) if on]
        parts.append(SERIAL_DRIVER if self.serial else "parallel")
        return "+".join(parts)


def cpu_option_space() -> list[ModuleOptions]:
    """The option sets of a CPU target, the default first (GPU targets keep their default:
    these switches are CPU codegen and CPU runtime choices)."""
    return [ModuleOptions(dt, uk, serial, fusion)
            for fusion, serial, dt, uk in itertools.product((False, True), repeat=4)]
