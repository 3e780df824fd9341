"""`sft.compile`: a model in, a callable out."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import ir
from .backend import TARGETS, compile_module, load
from .backend import profile
from .backend.iree import Artifact
from .errors import SftError
from .importers import import_mlir_file, import_mlir_text, import_torch
from .passes import LowerPass, RaisePass, VerifyPass
from .passes.apply_plan import ApplyPlanPass
from .passes.expand_batch import ExpandBatchPass, expandable
from .passes.reassociate import ReassociatePass
from .plan import Plan
from .cost.targets import describe
from .measure import target_key, verify
from .search import SearchReport, search_program
from .search.chains import choose_orders, plan_orders
from .space.chains import contraction_chains
from .space.kernels import contraction_kernels
from .space.options import option_space
from .tuning_db import TuningDB
from .values import NP_TYPES, Signature, assemble, check_inputs, spec_of


@dataclass
class Stages:
    """The program's text at each step, kept when `keep_ir=True`."""

    linalg: str = ""
    sft: str = ""
    lowered: str = ""
    planned: str = ""


def to_sft(linalg_text: str, filename: str = "<input>"):
    """Parse linalg text into sft's context and raise it; returns the module."""
    module = ir.parse(ir.sft_context(), linalg_text, filename)
    ir.verify(module, filename)
    RaisePass()(module)  # sft ops already in the input stay as they are
    VerifyPass()(module)
    return module


def lower(sft_module, plan: Plan) -> tuple[str, str]:
    """sft -> linalg text, then the plan imposed in IREE's context; returns (lowered, planned)."""
    ExpandBatchPass(plan.expand)(sft_module)
    ReassociatePass(plan.orders)(sft_module)
    LowerPass()(sft_module)
    lowered = ir.print_module(sft_module)
    iree_module = ir.parse(ir.iree_ir.Context(), lowered, "")
    ApplyPlanPass(plan)(iree_module)
    return lowered, ir.print_module(iree_module)


def count_opaque(sft_text: str) -> int:
    return sft_text.count('"sft.opaque"')


@dataclass
class CompiledModel:
    """A compiled program. Call it with torch tensors or numpy arrays, in the order of the
    example inputs; it returns what the model returns (a tensor, a tuple, a dict, ...) with the
    model's dtypes and shapes, as torch tensors when called with torch tensors, else numpy
    arrays. Inputs the model updates in place are updated."""

    artifact: Artifact
    plan: Plan
    signature: Signature
    stages: Stages = field(default_factory=Stages)
    opaque_ops: int = 0
    search: SearchReport | None = None
    entry: str = "main"

    def __post_init__(self):
        self._loaded = load(self.artifact, entry=self.entry, driver=self.plan.driver)

    @property
    def dispatch_count(self) -> int:
        return self.artifact.dispatch_count

    @property
    def input_specs(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return list(self.signature.inputs)

    def __call__(self, *args):
        arrays = check_inputs(args, self.signature.inputs)
        outs = self._loaded(*arrays)
        return assemble(outs, args, self.signature)


def _input_specs(example_inputs) -> list[tuple[tuple[int, ...], np.dtype]]:
    return [spec_of(x) for x in example_inputs]


def entry_function(module, filename: str = "<input>"):
    """The function a module is called through: `@main`, else its only public function."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    public = [f for f in funcs if "sym_visibility" not in f.attributes
              or ir.tm.StringAttr(f.attributes["sym_visibility"]).value == "public"]
    names = [ir.tm.StringAttr(f.attributes["sym_name"]).value for f in public]
    if "main" in names:
        return public[names.index("main")]
    if len(public) == 1:
        return public[0]
    if not public:
        raise SftError("the module has no public func.func to call", filename)
    raise SftError(f"the module has {len(public)} public functions ({', '.join('@' + n for n in names)}) "
                   "and none is @main: which one to call is ambiguous", filename)


def _module_signature(module, filename: str = "<input>") -> tuple[Signature, str]:
    """The entry function's inputs (static shapes required) and its name."""
    func = entry_function(module, filename)
    name = ir.tm.StringAttr(func.attributes["sym_name"]).value
    specs = []
    for i, arg in enumerate(func.regions[0].blocks[0].arguments):
        loc = ir.where(func.location) or filename
        if not isinstance(arg.type, ir.tm.RankedTensorType):
            raise SftError(f"argument {i} of @{name} is {arg.type}: only ranked tensors are supported", loc)
        ty = ir.tm.RankedTensorType(arg.type)
        if not ty.has_static_shape:
            raise SftError(f"argument {i} of @{name} is {ty}: dynamic shapes are not supported; "
                           "compile for the shapes it will be called with", loc)
        if str(ty.element_type) not in NP_TYPES:
            raise SftError(f"argument {i} of @{name} is {ty}: element type {ty.element_type} "
                           "is not supported", loc)
        specs.append((tuple(ty.shape), np.dtype(NP_TYPES[str(ty.element_type)])))
    return Signature(tuple(specs)), name


def _specs_from_mlir(text: str) -> list[tuple[tuple[int, ...], np.dtype]]:
    return list(_module_signature(ir.parse(ir.sft_context(), text, ""))[0].inputs)


def _import(model, example_inputs=()) -> tuple[str, str, Signature | None]:
    """(linalg text, a name for error messages, the front end's signature or None) for a torch
    module, a JAX function, MLIR text or an .mlir path."""
    if isinstance(model, Path) or (isinstance(model, str) and model.endswith(".mlir") and "\n" not in model):
        return import_mlir_file(model), str(model), None
    if isinstance(model, str):
        return import_mlir_text(model), "<input>", None
    if callable(model) and not hasattr(model, "state_dict"):  # a function, not a torch module
        from .importers.jax import import_jax

        text, signature = import_jax(model, example_inputs)
        return text, getattr(model, "__name__", type(model).__name__), signature
    text, signature = import_torch(model, example_inputs)
    return text, type(model).__name__, signature


def linalg_of(model, example_inputs=()) -> tuple[str, str]:
    """(linalg text, a name for error messages) for a torch module, MLIR text or an .mlir path."""
    return _import(model, example_inputs)[:2]


def iree_view(module, target: str, options) -> tuple[list, dict]:
    """The contraction kernels of an sft module, and IREE's view of the program (its dispatches
    and default configs) under each set of dispatch-forming flags that `options` use. Consumes
    the module."""
    kernels = contraction_kernels(module)
    default_text = lower(module, Plan())[1]
    profiles = {flags: profile(default_text, target, flags)
                for flags in sorted({o.formation_flags for o in options})}
    return kernels, profiles


REWRITE_MARGIN = 0.03  # a graph rewrite must predict this much gain over the program as written


def search_plan(sft_text: str, target: str, desc) -> tuple[Plan, SearchReport]:
    """The plan the cost model predicts fastest for `target` (described by `desc`), and the
    search's report."""
    options = option_space(target)
    # Batch expansion changes which dispatches IREE forms (and can bring two contractions next
    # to each other, making a chain), so the program is searched both ways, each on IREE's own
    # view of it; it is kept as written unless the expansion predicts a clear gain.
    written_module = to_sft(sft_text)
    reports, orders = {}, {}
    for expand in dict.fromkeys([(), expandable(written_module)]):
        variant = to_sft(sft_text) if expand else written_module
        ExpandBatchPass(expand)(variant)
        start = time.perf_counter()
        chains = choose_orders(contraction_chains(variant), desc, desc.cores)
        seconds = time.perf_counter() - start
        orders[expand] = plan_orders(chains)
        ReassociatePass(orders[expand])(variant)
        reports[expand] = search_program(*iree_view(variant, target, options), desc, options)
        reports[expand].add_chains(chains, seconds)
    written = reports[()].ranked[0].predicted
    expand = min(reports, key=lambda e: reports[e].ranked[0].predicted)
    if reports[expand].ranked[0].predicted > written * (1.0 - REWRITE_MARGIN):
        expand = ()
    report = reports[expand]
    report.add_alternatives(reports)
    best = report.ranked[0]
    tiles = ()
    if best.options.keeps_tiles:
        tiles = tuple((c.kernel.op_id, c.space.config(c.best)) for c in best.kernels if c.best != 0)
    report.chosen = best.options.describe()
    return Plan(expand=expand, orders=orders[expand], tiles=tiles, flags=best.options.flags,
                driver=best.options.driver), report


def _random_inputs(specs) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
            else np.zeros(shape, dtype) for shape, dtype in specs]


def searched_plan(sft_text: str, target: str, search: str, specs, db: TuningDB) -> tuple[Plan, SearchReport]:
    """search="model" or "verify": replayed from the tuning database when this program was
    searched before on this target and compiler, else searched (and recorded)."""
    workload = hashlib.sha256(sft_text.encode()).hexdigest()[:24]
    desc = describe(target)
    tkey = target_key(desc)
    hit = db.lookup_plan(workload, tkey, search)
    if hit is not None:
        try:
            stored = json.loads(hit[1])
            report = SearchReport(scored=stored.get("scored", 0),
                                  space_size_log10=stored.get("space_size_log10", 0.0),
                                  measured=stored.get("measured_s", {}),
                                  chosen=stored.get("chosen", ""), replayed=True)
            return Plan.from_json(hit[0]), report
        except (SftError, ValueError, AttributeError):
            pass  # a stored record that no longer reads: search again, and overwrite it
    plan, report = search_plan(sft_text, target, desc)
    if search == "verify":
        with tqdm(desc="sft verify", unit="run", leave=False) as bar:
            plan = verify(report, lambda p: lower(to_sft(sft_text), p)[1], target, desc,
                          _random_inputs(specs), db, progress=bar.update)
    db.record_plan(workload, tkey, search, plan.to_json(), report.to_json())
    return plan, report


def compile(model, example_inputs=(), target: str = "host", plan: Plan | None = None,
            search: str = "none", keep_ir: bool = False) -> CompiledModel:
    """Compile a torch.nn.Module (with example inputs), MLIR text or an .mlir file for `target`.

    The model goes to linalg, is raised to sft, lowered with a plan, compiled by IREE and loaded.
    The plan is `plan` if given; else with search="model" the cost model's best; else empty
    (IREE decides everything). `keep_ir` keeps the text of every stage.
    """
    if search not in ("none", "model", "verify"):
        raise SftError(f"search must be 'none', 'model' or 'verify', not {search!r}")
    if target not in TARGETS:
        raise SftError(f"unknown target {target!r} (known: {', '.join(sorted(TARGETS))})")
    linalg_text, name, torch_signature = _import(model, example_inputs)
    sft_module = to_sft(linalg_text, name)
    signature, entry = _module_signature(sft_module, name)
    if torch_signature is not None:
        signature = torch_signature
    sft_text = ir.print_module(sft_module)
    report = None
    if plan is None and search != "none":
        plan, report = searched_plan(sft_text, target, search, list(signature.inputs), TuningDB())
    plan = plan or Plan()
    try:
        lowered, planned = lower(sft_module, plan)
        artifact = compile_module(planned, target, plan.flags)
    except SftError:
        if report is None:
            raise
        # A searched (or replayed) plan that does not apply or that IREE refuses is discarded,
        # never fatal: fall back to IREE's choice.
        plan, report.fallback = Plan(), True
        lowered, planned = lower(to_sft(sft_text, name), plan)
        artifact = compile_module(planned, target)
    stages = Stages(linalg_text, sft_text, lowered, planned) if keep_ir else Stages()
    return CompiledModel(artifact, plan, signature, stages, count_opaque(sft_text), report, entry)
