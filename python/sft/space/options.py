"""Whole-program backend options: how IREE partitions the program into dispatches and lays out
contraction operands, whether it calls its micro-kernels, and which runtime driver executes it.

Each is a real choice whose best value depends on the workload: IREE's aggressive fusion forms
fewer, larger dispatches (layernorm's two reductions become one), which its codegen does not
always handle as well; data tiling packs operands into cache-friendly tiles at the price of
pack/unpack work; IREE's micro-kernels replace the packed contractions' generated code; the parallel executor (`local-task`) spreads work over cores at a fixed wake-up
cost per call, while `local-sync` runs inline on the caller's thread; IREE's im2col rewrites
convolutions as a patch copy and a matmul (a CNN training step's kernels, timed alone, took
2708 us so against 3845 us: its filter-gradient convolution 1320 us as IREE's convolution, 172 +
88 us as a matmul and a patch copy). Index 0 is IREE's default partition, layout and driver.

Every CPU option set also lets IREE reassociate floating-point reductions (`REASSOCIATE`), as
every framework's reductions do (PyTorch's vectorized CPU kernels, XLA, Inductor): without it
IREE's code adds a reduction's terms one at a time in order, a scalar dependence chain (batch
norm's per-channel sums of a CNN step: 169 us a call against 31, the whole step on one thread
1566 against 1300 us). It changes no dispatch, only the summation order inside one, so it is no
decision for the search to price: the default plan IREE compiles (`Plan()`) is left without it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

# Data tiling from IREE's global optimization, not `--iree-opt-data-tiling` (the dispatch
# creation path): that one packs a contraction inside its consumers' dispatch, and IREE's CPU
# code generation fails on most such dispatches ("large vector sizes", a 132 KiB stack) — every
# torch and JAX MLP and GPT-2 training step here, mlp_b128 and GPT-2 small inference. This one
# packs and unpacks in dispatches of their own, fused with their elementwise neighbours, and
# compiled every program of the bench suites; a JAX MLP step at batch 128 ran 1.06-1.15x IREE's
# default with it (ukernels, three runs), 1.05x with the other path's contractions each alone.
DATA_TILING = "--iree-global-opt-data-tiling"
UKERNELS = "--iree-llvmcpu-enable-ukernels=all"
AGGRESSIVE_FUSION = "--iree-dispatch-creation-enable-aggressive-fusion"
IM2COL = "--iree-global-opt-use-im2col-for-convs"
REASSOCIATE = "--iree-llvmcpu-reassociate-fp-reductions=true"
FORMATION_FLAGS = (AGGRESSIVE_FUSION, DATA_TILING, IM2COL)  # flags that change the dispatches
SERIAL_DRIVER = "local-sync"


@dataclass(frozen=True)
class ModuleOptions:
    data_tiling: bool = False
    ukernels: bool = False
    serial: bool = False  # run on local-sync instead of the target's parallel driver
    fusion: bool = False  # IREE's aggressive fusion partition instead of its default one
    im2col: bool = False  # convolutions as im2col + matmul (offered where a program has some)
    reassociate: bool = False  # IREE's CPU code may reorder a reduction's sum (`REASSOCIATE`)

    @property
    def flags(self) -> tuple[str, ...]:
        return self.formation_flags + (UKERNELS,) * self.ukernels + (REASSOCIATE,) * self.reassociate

    @property
    def formation_flags(self) -> tuple[str, ...]:
        """The flags that change which dispatches IREE forms (the program's IREE profile)."""
        return ((AGGRESSIVE_FUSION,) * self.fusion + (DATA_TILING,) * self.data_tiling
                + (IM2COL,) * self.im2col)

    @property
    def driver(self) -> str:
        return SERIAL_DRIVER if self.serial else ""

    @property
    def is_default(self) -> bool:
        """IREE's default partition, operand layout and driver (what the trust gate holds every
        pick against; reassociation changes none of them)."""
        return not (self.data_tiling or self.ukernels or self.serial or self.fusion or self.im2col)

    @property
    def keeps_tiles(self) -> bool:
        """Tile configs apply to IREE's default contraction codegen only: data tiling and
        micro-kernels replace it."""
        return not (self.data_tiling or self.ukernels)

    def describe(self) -> str:
        parts = [name for name, on in (("aggressive-fusion", self.fusion),
                                       ("data-tiling", self.data_tiling),
                                       ("im2col", self.im2col),
                                       ("ukernels", self.ukernels)) if on]
        parts.append(SERIAL_DRIVER if self.serial else "parallel")
        return "+".join(parts)


def cpu_option_space() -> list[ModuleOptions]:
    """The option sets of a CPU target, the default first (GPU targets keep their default:
    these switches are CPU codegen and CPU runtime choices)."""
    every = [ModuleOptions(dt, uk, serial, fusion, im2col, reassociate=True)
             for im2col, fusion, serial, dt, uk
             in itertools.product((False, True), repeat=5)]
    # im2col's matmuls are IREE's default contraction code: with data tiling they would be packed
    # too, a combination that doubles the profiles for nothing measured. IREE's CPU micro-kernels
    # replace packed contractions, packs and unpacks only: without data tiling the executables
    # are the same as IREE's default ones (checked on torch and JAX training steps), and the
    # option set would only drop sft's tiles.
    return [o for o in every if not (o.im2col and o.data_tiling) and not (o.ukernels and not o.data_tiling)]
