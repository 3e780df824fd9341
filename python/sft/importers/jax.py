"""A JAX function + example arguments -> linalg-on-tensors text, with the signature that maps the
compiled function's flat arguments and results to the function's own pytrees.

The route: `jax.jit(fn).lower(*args)` gives StableHLO; iree-compile's input phase
(`backend.iree.convert_input`) turns it into linalg on tensors, but in IREE's own function form
(`util.func` / `util.return` / `util.call`, in a module named `@jit_<name>`). sft's passes and
runtime wrapper expect upstream `func.func @main` in an unnamed module (the runtime then finds
it as `ctx.modules.module`), so `_as_func_module` rebuilds each function as a `func.func` in
IREE's context: the body's blocks are moved, not re-printed, so nothing is lost or re-parsed.

Arguments are pytrees (dicts, tuples, lists of arrays, e.g. flax parameters): JAX flattens them
with `jax.tree_util.tree_flatten` and the compiled function takes the leaves in that order.
`Signature.flatten` does the same to a call's arguments (the call must have the example's
structure), and `Signature.unflatten` rebuilds the result's pytree. Non-array arguments are not
static: a Python scalar is traced as a 0-d array of JAX's (weak) dtype, as `jax.jit` does;
bind static arguments with `functools.partial`.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..errors import SftError
from ..values import NP_TYPES, Result, Signature

# dtypes the runtime boundary carries: values.NP_TYPES, and unsigned integers (PRNG keys are
# uint32) as the same bits of the signed type IREE's signless integers give back; others
# (complex, float8, ...) are refused.
_UNSIGNED = {np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)}
_SUPPORTED = {np.dtype(t) for t in NP_TYPES.values()} | _UNSIGNED


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_dtypes(avals, what: str, name: str) -> None:
    """Refuse dtypes that the compiled module could not take or return faithfully (typed PRNG
    keys included: their dtype is not a numpy one)."""
    for i, aval in enumerate(avals):
        try:
            ok = np.dtype(aval.dtype) in _SUPPORTED
        except TypeError:  # an extended dtype such as key<fry>
            ok = False
        if not ok:
            keys = "; typed PRNG keys go through sft.jit" if "key<" in str(aval.dtype) else ""
            raise SftError(f"{what} {i} is {aval.dtype}{list(aval.shape)}: dtype {aval.dtype} is "
                           f"not supported (supported: {', '.join(sorted(map(str, _SUPPORTED)))})"
                           f"{keys}", name)


def _lower(fn, args: tuple, name: str, donate_argnums: tuple[int, ...] = ()):
    """`jax.jit(fn).lower(*args)`, its failures (not traceable, wrong arguments) as SftError.
    `keep_unused=True`: JAX would otherwise drop arguments the function does not read, and the
    compiled function would no longer take every leaf of the arguments."""
    import jax

    bad = [i for i in donate_argnums if not isinstance(i, int) or not 0 <= i < len(args)]
    if bad:
        raise SftError(f"donate_argnums {bad}: the function has {len(args)} positional "
                       "arguments", name)
    try:
        return jax.jit(fn, keep_unused=True, donate_argnums=donate_argnums).lower(*args)
    except Exception as exc:  # TypeError, a tracer error, an error in the user's code, ...
        raise SftError(f"could not trace the function with JAX at the example arguments: "
                       f"{type(exc).__name__}: {_first_line(exc)}", name) from None


def _rebuild(op, new_name: str, attributes: dict):
    """A new op `new_name` in place of `op` with its operands, result types and regions (moved),
    and `attributes`; `op` is erased. Only the ops of this module go through here."""
    mlir = ir.iree_ir
    with mlir.InsertionPoint(op):
        new = mlir.Operation.create(new_name, results=[r.type for r in op.results],
                                 operands=list(op.operands), attributes=attributes,
                                 regions=len(op.regions), loc=op.location)
    for old_region, new_region in zip(op.regions, new.regions):
        for block in list(old_region.blocks):
            block.append_to(new_region)
    for old, fresh in zip(op.results, new.results):
        old.replace_all_uses_with(fresh)
    op.erase()
    return new


# What each of IREE's util ops becomes, and which of its attributes carry over. `tied_operands`
# (a result aliasing an argument) has no func equivalent and is refused; `arg_attrs`/`res_attrs`
# (JAX's ABI annotations: result names, shardings) and `inlining_policy` mean nothing to sft.
_UTIL_TO_FUNC = {
    "util.func": ("func.func", ("sym_name", "function_type", "sym_visibility")),
    "util.return": ("func.return", ()),
    "util.call": ("func.call", ("callee",)),
}


def _tied(attrs) -> bool:
    """Whether a util op ties a result to an operand: IREE writes `tied_operands` on every
    util.func, -1 for a result that is its own."""
    if "tied_operands" not in attrs:
        return False
    return any(ir.iree_ir.IntegerAttr(a).value >= 0
               for a in ir.iree_ir.ArrayAttr(attrs["tied_operands"]))


def _check_entry(module, specs, name: str) -> None:
    """The converted module's @main takes exactly the example's leaves (same shapes): a guard
    against JAX (or IREE) having dropped or reordered an argument."""
    mlir = ir.iree_ir
    mains = [op for op in module.body.operations if op.operation.name == "func.func"
             and mlir.StringAttr(op.attributes["sym_name"]).value == "main"]
    if len(mains) != 1:
        raise SftError("JAX's program has no @main after IREE's input conversion", name)
    shapes = [tuple(mlir.ShapedType(a.type).shape) for a in mains[0].regions[0].blocks[0].arguments]
    if shapes != [shape for shape, _ in specs]:
        raise SftError(f"JAX's program takes arguments of shapes {shapes}, expected the "
                       f"example's leaves {[shape for shape, _ in specs]}", name)


def _donated(main) -> dict[int, int]:
    """@main's donated arguments: argument index -> the result JAX writes in its place (IREE's
    input phase turns JAX's `tf.aliasing_output` into `iree.abi.output`)."""
    mlir = ir.iree_ir
    if "arg_attrs" not in main.attributes:
        return {}
    found = {}
    for i, attrs in enumerate(mlir.ArrayAttr(main.attributes["arg_attrs"])):
        attrs = mlir.DictAttr(attrs)
        if "iree.abi.output" in attrs:
            found[i] = mlir.IntegerAttr(attrs["iree.abi.output"]).value
    return found


def _as_func_module(text: str, specs, name: str) -> tuple[str, dict[int, int]]:
    """IREE's input-phase output (`module @jit_f { util.func public @main ... }`) as an unnamed
    module of `func.func`s, printed without locations (as the torch front end prints); its
    @main checked against the example's leaves `specs`. Also returns @main's donated
    arguments (`_donated`)."""
    mlir = ir.iree_ir
    ctx = mlir.Context()
    module = ir.parse(ctx, text, name)
    found: list = []

    def collect(op):
        if op.name in _UTIL_TO_FUNC:
            found.append(op)
        return mlir.WalkResult.ADVANCE

    with ctx, mlir.Location.unknown():
        if "sym_name" in module.operation.attributes:
            del module.operation.attributes["sym_name"]
        module.operation.walk(collect)  # post-order: returns and calls before their function
        donated = {}
        for op in found:
            attrs = op.attributes
            if _tied(attrs):
                raise SftError(f"{op.name} with tied operands (a result aliasing an argument) "
                               "is not supported", name)
            if op.name == "util.func" and mlir.StringAttr(attrs["sym_name"]).value == "main":
                donated = _donated(op)
            new_name, keep = _UTIL_TO_FUNC[op.name]
            _rebuild(op, new_name, {k: attrs[k] for k in keep if k in attrs})
        ir.verify(module, name)
        _check_entry(module, specs, name)
        return ir.print_module(module), donated


def _flattener(in_tree, specs):
    """`flatten(args)`: a call's positional arguments as the compiled function's flat inputs.
    The call has the example's pytree structure, or passes the leaves themselves (flat). Python
    scalars become arrays of the compiled dtype when JAX would accept them (an int for an int or
    float input, a float for a float input, a bool for a bool), as `jax.jit`'s weak types do;
    numpy arrays are taken in JAX's canonical dtype (float64 as float32 while x64 is off)."""
    import jax
    import jax.numpy as jnp

    flat_tree = jax.tree_util.tree_structure(tuple(range(len(specs))))

    def fits(value, dtype) -> bool:
        if isinstance(value, bool):
            return dtype == np.bool_
        if isinstance(value, int):
            return bool(jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating))
        if isinstance(value, float):
            return bool(jnp.issubdtype(dtype, jnp.floating))
        return False

    def flatten(args) -> list:
        leaves, tree = jax.tree_util.tree_flatten(tuple(args))
        if tree != in_tree and tree != flat_tree:
            raise SftError(f"the arguments' structure {tree} differs from the example's {in_tree}")
        return [np.asarray(x, dtype) if fits(x, dtype) or canonical(x, dtype) else x
                for x, (_, dtype) in zip(leaves, specs)]

    def canonical(value, dtype) -> bool:
        """A numpy array JAX takes as `dtype` (float64 as float32 while x64 is off)."""
        return isinstance(value, (np.ndarray, np.generic)) and value.dtype != dtype \
            and jax.dtypes.canonicalize_dtype(value.dtype) == dtype

    return flatten


def import_jax(fn, example_args, donate_argnums: tuple[int, ...] = ()) -> tuple[str, Signature]:
    """Trace `fn` at `example_args` (a tuple of positional arguments, each an array, a Python
    scalar, a `jax.ShapeDtypeStruct` or a pytree of them) and convert it to linalg-on-tensors
    text with an `@main` taking the arguments' leaves in JAX's flattening order.

    `donate_argnums` as `jax.jit`'s: the results JAX pairs with the donated arguments' leaves
    (same shape and dtype) are `Result("device", leaf)`: that leaf's new value, left on the
    device."""
    import jax

    from ..backend.iree import convert_input

    name = getattr(fn, "__name__", type(fn).__name__)
    if not callable(fn):
        raise SftError(f"expected a JAX-traceable function, got {type(fn).__name__}", name)
    if not isinstance(example_args, (tuple, list)):
        raise SftError(f"example arguments must be a tuple of positional arguments, not "
                       f"{type(example_args).__name__} (write `(x,)` for one argument)", name)
    args = tuple(example_args)
    lowered = _lower(fn, args, name, tuple(donate_argnums))
    in_avals = jax.tree_util.tree_leaves(lowered.args_info)  # (args, kwargs) -> ArgInfo leaves
    out_avals, out_tree = jax.tree_util.tree_flatten(lowered.out_info)
    _check_dtypes(in_avals, "argument leaf", name)
    _check_dtypes(out_avals, "result leaf", name)
    specs = tuple((tuple(a.shape), np.dtype(a.dtype)) for a in in_avals)
    in_tree = jax.tree_util.tree_structure(args)
    if in_tree.num_leaves != len(specs):
        raise SftError(f"JAX traced {len(specs)} argument leaves, the example has "
                       f"{in_tree.num_leaves}", name)

    text, donated = _as_func_module(convert_input(lowered.as_text(), "stablehlo"), specs, name)
    replaces = {result: leaf for leaf, result in donated.items()}
    results = tuple(Result("device", replaces[i]) if i in replaces
                    else Result("output", np.dtype(a.dtype) if np.dtype(a.dtype) in _UNSIGNED else None)
                    for i, a in enumerate(out_avals))
    return text, Signature(specs, results,
                           lambda leaves: jax.tree_util.tree_unflatten(out_tree, leaves),
                           flatten=_flattener(in_tree, specs))
