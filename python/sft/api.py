"""`sft.compile`: a model in, a callable out. The facade: import, compile (the search and its
fallbacks are `search.strategy`'s), return a CompiledModel."""

from __future__ import annotations

from .compiled import CompiledModel, Stages
from .passes.split_batch import split_layout, split_of
from .plan import Plan
from .program import Program, import_model, prepare
from .search.compile import compile_program
from .search.strategy import check_precision
from .targets import Target, get_target
from .values import updated_results


def linalg_of(model, example_inputs=()) -> tuple[str, str]:
    """(linalg text, a name for error messages) for a torch module, a JAX function, MLIR text
    or an .mlir path; a torch model's state comes first among the function's arguments."""
    return import_model(model, example_inputs)[:2]


def count_opaque(sft_text: str) -> int:
    return sft_text.count('"sft.opaque"')


def compile(model, example_inputs=(), target: Target | str = "host", plan: Plan | None = None,
            search: str = "none", keep_ir: bool = False, precision: str = "f32",
            donate_argnums: tuple[int, ...] = (), farm=None) -> CompiledModel:
    """Compile a torch.nn.Module or a JAX function (with example inputs), MLIR text or an .mlir
    file for `target` (a name from `sft targets`: host, cuda:sm_80, cuda:sm_90, rocm:gfx942,
    vulkan:rdna3, or a Target).

    The model goes to linalg (a torch model's parameters and buffers as arguments, never as
    constants in the IR), is raised to sft, lowered with a plan, compiled by IREE and loaded,
    with its state on the device. The plan is `plan` if given; else with search="model" the
    cost model's best, with search="verify" the fastest measured of the model's top picks; else
    empty (IREE decides everything). `keep_ir` keeps the text of every stage.

    `precision` is what the search may compute f32 contractions in: "f32" (the default: every
    value as the model states it), or "bf16" / "f16": with search="model", each f32 contraction
    kernel may take inputs rounded to that type and accumulate in f32 where the cost model
    predicts it faster, casts included (on a GPU, MMA intrinsics; never on the host CPU, where
    IREE's bf16 code measured slower). Outputs stay f32; the values differ by the rounding
    (about 1e-2 relative for bf16). The choice is never silent: `plan.low_precision` lists the
    ops and `compiled.search.chosen` says "bf16 inputs, f32 accumulation on ops [...]". Not
    with search="verify" (an SftError); with search="none" it changes nothing. Anything else
    is an SftError naming the allowed values.

    `donate_argnums` (JAX functions) is `jax.jit`'s: the positional arguments whose buffers
    the function's results replace, such as a training step's parameters and optimizer state.
    The results JAX pairs with their leaves (same shape and dtype) come back as
    `sft.DeviceArray`s that stay on the device: pass them to the next call and the state never
    crosses to the host (`np.asarray(a)` or `jnp.asarray(a)` reads one). A DeviceArray passed
    as a donated argument is deleted by the call, as a donated JAX array is.

    `farm` sends search="verify"'s candidate compiles and timings to a Ray cluster (`pip
    install -e '.[farm]'`): "local" or "local:N" (a cluster on this machine, N workers),
    "auto" (the cluster `ray start` runs here), "ray://host:port" (a remote one), or a
    `sft.backend.farm.Farm`. Compiles run on any worker that builds the same code; each
    comparison is timed on one worker whose machine is the target's (`backend/farm.py`). None
    (the default) takes $SFT_RAY_ADDRESS where it is set; "" runs verify here even then.
    """
    target = get_target(target)  # before the import, which can take a while
    check_precision(precision, search)
    compiled = compile_prepared(*prepare(model, example_inputs, donate_argnums), target, plan,
                                search, keep_ir, precision, farm)
    if hasattr(model, "modules") and hasattr(model, "training"):  # a torch module
        compiled.watch_mode(model)
    compiled.inference_only = True
    return compiled


def compile_prepared(program: Program, module, target: Target, plan: Plan | None = None,
                     search: str = "none", keep_ir: bool = False, precision: str = "f32",
                     farm=None) -> CompiledModel:
    """`compile` of a prepared program (`module` is its raised sft module, consumed)."""
    plan, report, lowered, planned, artifact = compile_program(program, module, target, plan, search,
                                                               precision, farm)
    stages = Stages(program.linalg, program.sft_text, lowered, planned) if keep_ir else Stages()
    split = split_of(plan)
    layout = split_layout(program.module(), split, updated_results(program.signature)) if split else None
    return CompiledModel(artifact, plan, program.signature, program.state, stages,
                         count_opaque(program.sft_text), report, program.entry, program.seconds, layout)
