"""A target: everything the search, the cost model, verify and the backend need to know about
where code runs, in one object (as TVM's TuneContext carries one target to every role).

A target is a name (`host`, `cuda:sm_90`, ...), the iree-compile flags that build for it (and,
where IREE has no flag for the device, the `#hal.device.target` the module carries instead),
the runtime driver, its hardware description (the program-level cost terms) and its kernel
code generation: the space of configs searched per contraction and the model that ranks them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..cost.hardware import TargetDesc
from ..cost.trust import Trust
from ..space.kernels import Kernel
from ..space.options import ModuleOptions

# iree-compile demotes f64 to f32 unless told not to; the targets that keep f64 pass this.
KEEP_F64 = "--iree-input-demote-f64-to-f32=false"



class Codegen(Protocol):
    """A kernel decision space and the cost model that ranks it, for one kind of codegen."""

    def space(self, kernel: Kernel):
        """The candidates for a kernel: `.candidates` (rows; row 0 = IREE's default) and
        `.config(index)` (the decision record imposed on the kernel; None for row 0)."""

    def default(self, kernel: Kernel, dispatch) -> tuple:
        """IREE's own choice for the kernel as a candidate row, read from its dispatch."""

    def predict(self, kernel: Kernel, candidates: np.ndarray, desc: TargetDesc, cores: int,
                default: tuple) -> np.ndarray:
        """Predicted seconds per candidate row on `cores` cores (row of zeros: `default`)."""

    def low_precision(self, kernel: Kernel, dtype: str) -> Kernel | None:
        """Optional. The kernel's low-precision twin (`dtype` inputs, "bf16" or "f16",
        accumulating in its f32 result: `Kernel.input_type`) for `space` and `predict` to
        score, or None where this codegen does not offer one. A codegen without the method
        offers none (the host's: IREE 3.13's bf16 CPU code measured slower than its f32)."""


@dataclass(frozen=True)
class Target:
    name: str                          # as users write it: host, cuda:sm_80, rocm:gfx942, ...
    about: str                         # one line for `sft targets`
    flags: tuple[str, ...]             # iree-compile options that build for it
    driver: str                        # IREE runtime driver that runs it
    desc: TargetDesc                   # hardware numbers for the program-level cost terms
    codegen: Codegen | None            # kernel configs searched; None: IREE's own everywhere
    options: tuple[ModuleOptions, ...] = (ModuleOptions(),)  # backend option sets; default first
    kernel_driver: str = ""            # driver a kernel is timed on alone ("": `driver`)
    device_attr: str = ""              # #hal.device.target the module carries, where no flag says it
    machine: str = ""                  # the machine the code is for, where a flag says only `host`
    # False where the cost model's timings mean nothing (a software GPU): its kernel space still
    # serves the fuzzer and gpu-check, but the search keeps IREE's configs (`searched_codegen`)
    model_times: bool = True
    # how far the model's whole-program predictions are believed over IREE's default, per kind
    # of decision (measured on the host by `sft-bench quality --programs --store`)
    trust: Trust = Trust()
    # f64 math ops (tanh, sin, ...) lowered by sft (passes/f64_math.py) where IREE's codegen for
    # the target has no f64 implementation of them (the CPU's: no libm in its executables)
    expand_f64_math: bool = False
    # the values a call replaces (a training step's state, JAX's donated inputs) written by
    # IREE into storage arguments the caller passes (`passes.output_storage`). Right on the
    # CPU, but not a gain everywhere (on a 2-core Zen 4: JAX MLP steps 1.10-1.25x faster, torch
    # MLP steps 0.90-0.93x, a GPT-2 block 0.97-1.02x; docs/results.md): off until the search
    # decides it per program
    state_in_place: bool = False
    # filter gradients (convolutions whose window is larger than their output) as a patch copy
    # and a matmul (`passes.im2col`) in every plan the search builds: IREE's CPU convolution
    # code ran them at 5 GFLOP/s, and the rewrite took CNN training steps 2.3-2.5x faster on a
    # 2-core Zen 4. Not measured on a GPU, where IREE's own convolution strategy differs.
    im2col_filter_gradients: bool = False
    # Sums over outer dims whose few kept dims are innermost (channels-last batch norm) as
    # sums of split rows and a fold (`passes.split_reduction`) in every plan the search
    # builds: IREE's CPU code walked them 2 columns at a time (168 -> 33 us for a batch norm's
    # two sums on a Zen 4 core). Not measured on a GPU.
    split_outer_sums: bool = False
    # An inference program whose rows are independent may run as parts of its batch side by
    # side, one thread a part (`passes.split_batch`, `search.batch_split`): a CPU's cores.
    split_batches: bool = False
    # Weights held packed in panels and multiplied by IREE's 4-D matmul at a register block of
    # the vector ISA (`passes.hold_packed`): verify times the plans that hold weights packed too.
    # A CPU's: its codegen of mmt4d is what was measured (the vendor library's rate).
    pack_weights: bool = False

    @property
    def searched_codegen(self) -> Codegen | None:
        """The codegen whose configs the search chooses among: None where it keeps IREE's."""
        return self.codegen if self.model_times else None

    def module_text(self, text: str) -> str:
        """`text` as iree-compile gets it: with this target's device on the module where the
        target is named by an attribute rather than flags."""
        if not self.device_attr:
            return text
        attr = f"hal.device.targets = [{self.device_attr}]"
        found = re.search(r"^module(?: @[\w.$-]+)?(?: attributes \{)?", text, re.M)
        if found is None:  # bare functions: wrap them
            return f"module attributes {{{attr}}} {{\n{text}\n}}\n"
        head = found.group(0)
        new = f"{head} {attr}," if head.endswith("{") else f"{head} attributes {{{attr}}}"
        return text[:found.start()] + new + text[found.end():]

    def compile_key(self) -> tuple[str, ...]:
        """What of the target decides the code IREE builds (the module cache's key)."""
        return (*self.flags, *(x for x in (self.device_attr, self.machine) if x))

    def key(self, revision: int) -> str:
        """The target part of a tuning-database key: its name, flags, hardware numbers, kernel
        codegen, option sets and trust factors, and the revision of the space and cost model (a
        new revision searches again)."""
        # The codegen's repr holds its hardware numbers (ISA, or the GPU's limits and peaks).
        text = (f"{revision}|{self.compile_key()}|{self.desc.to_json()}|{self.codegen!r}|{self.options}"
                f"|{self.trust.factors}")
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def gpu_program_desc(gpu) -> TargetDesc:
    """A GPU's program-level description (the other dispatches' memory time, launch costs,
    chain-order floors), derived from its kernel-level `cost.hardware.GpuDesc`: one source for a
    device's numbers."""
    return TargetDesc(
        name=f"{gpu.api}-{gpu.arch}", cores=gpu.compute_units, simd_f32=gpu.subgroup_size,
        vector_registers=gpu.max_registers_per_thread, peak_flops_f32=gpu.simt_f32 / gpu.compute_units,
        l1_bytes=gpu.shared_per_cu, l2_bytes=gpu.l2_bytes,
        l1_bandwidth=gpu.shared_bytes_per_clk * gpu.clock_hz,
        l2_bandwidth=gpu.l2_bandwidth / gpu.compute_units, dram_bandwidth=gpu.dram_bandwidth,
        dispatch_overhead=gpu.launch_overhead, workgroup_overhead=0.05e-6)
