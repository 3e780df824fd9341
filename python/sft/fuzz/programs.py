"""Random well-typed sft programs, built together with their numpy meaning.

A `Builder` grows one function op by op. Every value it makes (`values.Value`) carries, besides
its text name and shape, its exact value (float64, computed from the same inputs the program
gets), a bound on the rounding error a correct compiler may add (in units of the element type's
epsilon, by linear error analysis: a sum of n terms may be off by n ulps of the sum of the
terms' magnitudes, in any order, so reassociation and tiling stay inside it), and its magnitude (the value computed with
absolute values everywhere, which is what a later sum's error scales with).

Every choice goes through a `Chooser`, so that the same generator runs under hypothesis (choices
are draws, and failures shrink: every choice's smallest value is its simplest option) and under
a plain numpy RNG (the long campaign). Index maps are kept as text expressions over d0..dN-1 and
evaluated with numpy on the index grid: one gather serves views, maps, reductions and
contractions alike. With some probability (P_CALLEE) the first ops go to a private function
that @main calls. The scalar bodies of maps and reductions are bodies.py's, the view ops
views.py's, the functions' text (a private callee or not) layout.py's.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .choosers import Chooser
from .bodies import ScalarBodies
from .layout import function_text, outlined
from .views import ViewOps
from .values import NP_TYPES, Node, Program, Value, amap, gather, identity, segments, ttype

SIZES = (1, 2, 3, 5, 7, 13, 4, 8, 16)  # unit dims and small primes first (no tile divides them)
MAX_DOMAIN = 2048                      # loop iterations of one op: keeps compile and numpy cheap
INF_BITS = {"f32": ("0x7F800000", "0xFF800000"), "f64": ("0x7FF0000000000000", "0xFFF0000000000000")}
P_CALLEE = 0.25                        # how often the first ops go to a private callee

class Builder(ScalarBodies, ViewOps):
    """Grows one random program; `build()` returns it."""

    def __init__(self, ch: Chooser, dtype: str | None = None, max_ops: int = 5,
                 sizes: tuple[int, ...] = SIZES, summed_last: bool = False):
        self.ch = ch
        self.sizes = sizes
        self.summed_last = summed_last  # contractions' summed loops innermost (tiles apply)
        self.dtype = dtype or ("f64" if ch.flag(0.2) else "f32")
        self.max_ops = max_ops
        self.rng = np.random.default_rng(ch.int(0, 2**31 - 1))
        self.args: list[Value] = []
        self.values: list[Value] = []
        self.head: list[str] = []          # scalar constants, at the top of the function
        self.lines: list[str] = []
        self.consts: dict[str, str] = {}
        self.count = 0
        self.kinds: list[str] = []
        self.features: set[str] = set()
        self.const_view_sources: list[str] = []

    # -- names, constants, inputs -----------------------------------------------------------

    def fresh(self, stem: str = "v") -> str:
        self.count += 1
        return f"%{stem}{self.count}"

    def const(self, value: float) -> str:
        """A scalar constant defined at the top of the function (bodies read it from above)."""
        if math.isinf(value):
            literal = INF_BITS[self.dtype][value < 0]
        else:
            literal = f"{value:.6e}"
        if literal not in self.consts:
            name = self.fresh("c")
            self.head.append(f"  {name} = arith.constant {literal} : {self.dtype}")
            self.consts[literal] = name
        return self.consts[literal]

    def shape(self, min_rank: int = 1, max_rank: int = 3) -> tuple[int, ...]:
        rank = self.ch.int(min_rank, max_rank)
        return tuple(self.ch.pick(self.sizes) for _ in range(rank))

    def arg(self, shape) -> Value:
        x = self.rng.standard_normal(tuple(shape)).astype(NP_TYPES[self.dtype]).astype(np.float64)
        v = Value(f"%arg{len(self.args)}", tuple(shape), x, np.zeros_like(x), np.abs(x))
        self.args.append(v)
        return v

    def value(self, min_rank: int = 0, fresh: float = 0.25) -> Value:
        """An operand: mostly a value computed before (the newest first, which makes chains),
        sometimes a new input."""
        usable = [v for v in reversed(self.values) if len(v.shape) >= min_rank]
        if not usable or self.ch.flag(fresh):
            return self.arg(self.shape(max(1, min_rank)))
        return usable[self.ch.int(0, len(usable) - 1)]

    def emit(self, line: str, shape, ref, err, mag, kind: str, constant: bool = False) -> Value:
        name = line.split(" = ", 1)[0].strip()
        v = Value(name, tuple(shape), ref, err, mag, constant)
        self.lines.append(line)
        self.values.append(v)
        self.kinds.append(kind)
        return v

    def fill(self, shape, scalar: float) -> Value:
        name = self.fresh("f")
        line = (f"  {name} = \"sft.map\"() ({{\n    gpu.yield {self.const(scalar)} : {self.dtype}\n"
                f"  }}) {{maps = [], operandSegmentSizes = {segments(0)}}} : () -> {ttype(shape, self.dtype)}")
        full = np.full(tuple(shape), scalar)
        self.lines.append(line)
        # an infinite start (a max's identity) is never the result: it adds no magnitude
        return Value(name, tuple(shape), full, np.zeros(tuple(shape)),
                     np.where(np.isinf(full), 0.0, np.abs(full)), constant=True)

    # -- operands ---------------------------------------------------------------------------

    def read(self, v: Value, exprs, domain, stem="a") -> Node:
        """A block argument reading `v` through `exprs` over the domain."""
        return Node(self.fresh(stem), gather(v.ref, exprs, domain), gather(v.err, exprs, domain),
                    gather(v.mag, exprs, domain), True)

    def broadcast_operand(self, domain) -> tuple[Value, list[str]]:
        """A new input read over a subset of the domain's dims, in any order, or with a
        constant index (a broadcast through a unit or a fixed position)."""
        dims = [d for d in range(len(domain)) if self.ch.flag(0.6)]
        if self.ch.flag(0.3):
            self.shuffle(dims)
        exprs, shape = [f"d{d}" for d in dims], [domain[d] for d in dims]
        if self.ch.flag(0.2):
            size = self.ch.pick((1, 2, 3))
            pos = self.ch.int(0, len(exprs))
            exprs.insert(pos, str(self.ch.int(0, size - 1)))
            shape.insert(pos, size)
        if not exprs:
            exprs, shape = ["0"], [1]
        return self.arg(shape), exprs

    def shuffle(self, xs: list) -> None:
        for i in range(len(xs) - 1, 0, -1):
            j = self.ch.int(0, i)
            xs[i], xs[j] = xs[j], xs[i]

    # -- ops ----------------------------------------------------------------------------------

    def op_map(self) -> Value | None:
        x = self.value()
        domain = list(x.shape)
        x_exprs = identity(len(domain))
        if len(domain) >= 2 and self.ch.flag(0.3):  # read x transposed
            perm = list(range(len(domain)))
            self.shuffle(perm)
            domain = [x.shape[p] for p in perm]
            x_exprs = [f"d{perm.index(j)}" for j in range(len(domain))]
        operands = [(x, x_exprs)]
        for _ in range(self.ch.int(0, 2)):
            same = [v for v in self.values if v.shape == tuple(domain) and v is not x]
            if same and self.ch.flag(0.4):
                operands.append((self.ch.pick(same), identity(len(domain))))
            else:
                operands.append(self.broadcast_operand(domain))
        args = [self.read(v, e, domain) for v, e in operands]
        lines, result = self.body(args, domain, 4)
        name = self.fresh()
        maps = ", ".join(amap(len(domain), e) for _, e in operands)
        types = ", ".join(ttype(v.shape, self.dtype) for v, _ in operands)
        text = (f"  {name} = \"sft.map\"({', '.join(v.name for v, _ in operands)}) "
                f"{self.region(args, lines, result)} {{maps = [{maps}], operandSegmentSizes = "
                f"{segments(len(operands))}}} : ({types}) -> {ttype(domain, self.dtype)}")
        constant = not result.reads_input or all(v.constant for v, _ in operands)
        return self.emit(text, domain, result.ref, result.err, result.mag, "map", constant)

    def op_iota(self) -> Value | None:
        """A map with no inputs whose body reads the loop position: not a fill."""
        domain = list(self.shape())
        dim = self.ch.int(0, len(domain) - 1)
        i, k, name = self.fresh("s"), self.fresh("s"), self.fresh("s")
        r = np.indices(tuple(domain))[dim].astype(np.float64)
        lines = [f"{i} = \"sft.index\"() {{dim = {dim} : i64}} : () -> index",
                 f"{k} = arith.index_cast {i} : index to i64",
                 f"{name} = arith.sitofp {k} : i64 to {self.dtype}"]
        node = Node(name, r, np.zeros_like(r), r)
        out = self.fresh()
        text = (f"  {out} = \"sft.map\"() {self.region([], lines, node)} {{maps = [], "
                f"operandSegmentSizes = {segments(0)}}} : () -> {ttype(domain, self.dtype)}")
        return self.emit(text, domain, node.ref, node.err, node.mag, "iota")

    def op_reduce(self) -> Value | None:
        x = self.value(min_rank=1)
        domain = list(x.shape)
        if math.prod(domain) > MAX_DOMAIN:
            return None
        operands = [(x, identity(len(domain)))]
        if self.ch.flag(0.25):
            operands.append(self.broadcast_operand(domain))
        reduced = [d for d in range(len(domain)) if self.ch.flag(0.5)] or [self.ch.int(0, len(domain) - 1)]
        kept = [d for d in range(len(domain)) if d not in reduced]
        if kept and min(reduced) < max(kept):
            self.features.add("summed-loop-not-innermost")
        if len(kept) >= 2 and self.ch.flag(0.2):
            self.shuffle(kept)  # the result transposed
        count = math.prod(domain[d] for d in reduced)
        kinds = ["add", "max", "min", "maxnum", "minnum"]
        if count <= 8 and np.abs(x.ref).max(initial=0) <= 4:
            kinds.append("mul")
        kind = self.ch.pick(kinds)
        args = [self.read(v, e, domain) for v, e in operands]
        lines, body = self.body(args, domain, 2)
        if not body.reads_input or all(v.constant for v, _ in operands):  # IREE folds the inputs
            self.features.add("reduce-body-ignores-inputs")
        out_shape = [domain[d] for d in kept]
        # reduce the summed axes, then order the kept ones as the result map says
        order = [sorted(kept).index(d) for d in kept]

        def over(f, a):
            return np.transpose(f(a, axis=tuple(reduced)), order)

        identity_value = {"add": 0.0, "mul": 1.0, "max": -math.inf, "maxnum": -math.inf,
                          "min": math.inf, "minnum": math.inf}[kind]
        if self.ch.flag(0.3):
            init = self.fill(out_shape, self.ch.pick((0.0, 1.0, -2.0)))  # a non-identity start
        else:
            init = self.fill(out_shape, identity_value)
        if kind == "add":
            ref = init.ref + over(np.sum, body.ref)
            err = init.err + over(np.sum, body.err) + (count + 1) * (init.mag + over(np.sum, body.mag))
            mag = init.mag + over(np.sum, body.mag)
        elif kind == "mul":
            ref = init.ref * over(np.prod, body.ref)
            big = np.maximum(np.abs(init.ref), 1.0) * over(np.prod, np.maximum(np.abs(body.ref), 1.0))
            err = big * (init.err + over(np.sum, body.err) + count + 1)
            mag = init.mag * over(np.prod, body.mag)
        else:
            f = np.max if kind in ("max", "maxnum") else np.min
            ref = (np.maximum if f is np.max else np.minimum)(init.ref, over(f, body.ref))
            err = np.maximum(init.err, over(np.max, body.err))
            mag = np.maximum(init.mag, over(np.max, body.mag))
        name = self.fresh()
        maps = ", ".join([amap(len(domain), e) for _, e in operands] +
                         [amap(len(domain), [f"d{d}" for d in kept])])
        types = ", ".join(ttype(v.shape, self.dtype) for v, _ in operands)
        text = (f"  {name} = \"sft.reduce\"({', '.join(v.name for v, _ in operands)}, {init.name}) "
                f"{self.region(args, lines, body)} {{domain = array<i64: {', '.join(map(str, domain))}>, "
                f"kind = \"{kind}\", maps = [{maps}], operandSegmentSizes = "
                f"{segments(len(operands), True)}}} : ({types}, {ttype(out_shape, self.dtype)}) -> "
                f"{ttype(out_shape, self.dtype)}")
        return self.emit(text, out_shape, np.asarray(ref), np.asarray(err), np.asarray(mag), f"reduce-{kind}")

    def op_contract(self, lhs: Value | None = None, batch: int | None = None) -> Value | None:
        """An einsum: each lhs dim is batch, row (kept, lhs only) or summed; new column dims
        come with the rhs; every operand's dims in a random order, the loops too. With
        `batch`, a canonical batched matmul instead: the lhs is [batch.., m.., k], the rhs
        [batch.., k, n], the loops (batch.., m.., n, k)."""
        lhs = lhs or self.value(min_rank=1)
        roles = []
        for i in range(len(lhs.shape)):
            if batch is not None:
                roles.append("b" if i < batch else ("m" if i < len(lhs.shape) - 1 else "k"))
            else:
                # "s": summed, lhs only (rare: IREE's vectorizer refuses many such einsums)
                roles.append(self.ch.pick(("k", "m", "b")) if not self.ch.flag(0.05) else "s")
        loops = [(r, s) for r, s in zip(roles, lhs.shape)]           # one loop per lhs dim
        n_new = self.ch.int(0, 2) if batch is None else 1
        loops += [("n", self.ch.pick(self.sizes)) for _ in range(n_new)]  # rhs-only columns
        if batch is None and self.ch.flag(0.05):
            loops.append(("t", self.ch.pick(self.sizes)))                 # summed, rhs only
        if math.prod(s for _, s in loops) > MAX_DOMAIN:
            return None
        order = list(range(len(loops)))                              # loop i is domain dim pos[i]
        if batch is None and self.ch.flag(0.4):
            self.shuffle(order)
        if self.summed_last:  # stable: the parallel loops keep their order
            order.sort(key=lambda i: loops[i][0] in "kst")
        pos = {loop: d for d, loop in enumerate(order)}
        domain = [loops[i][1] for i in order]
        lhs_exprs = [f"d{pos[i]}" for i in range(len(lhs.shape))]
        rhs_loops = [i for i, (r, _) in enumerate(loops) if r in "bknt"]
        if batch is None and self.ch.flag(0.4):
            self.shuffle(rhs_loops)                                  # a transposed rhs
        rhs_shape = tuple(loops[i][1] for i in rhs_loops)
        same = [v for v in self.values + self.args if v.shape == rhs_shape]
        rhs = self.ch.pick(same) if same and self.ch.flag(0.3) else self.arg(rhs_shape)
        rhs_exprs = [f"d{pos[i]}" for i in rhs_loops]
        out_loops = [i for i, (r, _) in enumerate(loops) if r in "bmn"]
        out_loops.sort(key=lambda i: "bmn".index(loops[i][0]))       # batch, rows, columns
        if batch is None and self.ch.flag(0.2):
            self.shuffle(out_loops)
        out_shape = [loops[i][1] for i in out_loops]
        out_dims = [pos[i] for i in out_loops]
        reduced = tuple(d for d in range(len(domain)) if d not in out_dims)
        if reduced and out_dims and min(reduced) < max(out_dims):
            self.features.add("summed-loop-not-innermost")
        if out_dims != sorted(out_dims):
            self.features.add("result-transposed")
        init = self.fill(out_shape, 0.0)
        if self.ch.flag(0.15):
            same = [v for v in self.values if v.shape == tuple(out_shape)]
            init = self.ch.pick(same) if same else self.fill(out_shape, 1.0)
        if init is lhs or init is rhs:
            self.features.add("init-is-operand")
        a, b = self.read(lhs, lhs_exprs, domain), self.read(rhs, rhs_exprs, domain)
        order_out = [sorted(out_dims).index(d) for d in out_dims]

        def total(arr):
            return np.transpose(arr.sum(axis=reduced), order_out)

        count = math.prod(domain[d] for d in reduced)
        ref = init.ref + total(a.ref * b.ref)
        mag = init.mag + total(a.mag * b.mag)
        err = init.err + total(np.abs(b.ref) * a.err + np.abs(a.ref) * b.err) + (count + 1) * mag
        name = self.fresh()
        maps = [amap(len(domain), e) for e in (lhs_exprs, rhs_exprs, [f"d{d}" for d in out_dims])]
        out_t = ttype(out_shape, self.dtype)
        text = (f"  {name} = \"sft.contract\"({lhs.name}, {rhs.name}, {init.name}) {{domain = "
                f"array<i64: {', '.join(map(str, domain))}>, maps = [{', '.join(maps)}]}} : "
                f"({ttype(lhs.shape, self.dtype)}, {ttype(rhs.shape, self.dtype)}, {out_t}) -> {out_t}")
        kind = "contract" if batch is None else "contract-canonical"
        return self.emit(text, out_shape, np.asarray(ref), np.asarray(err), np.asarray(mag), kind)

    def op_chain(self) -> Value | None:
        """Two or three contractions, each reading the one before: a chain that sft-reassociate
        can evaluate in another order (when the intermediates start from zero, feed nothing
        else and the maps are plain)."""
        x = self.value(min_rank=2, fresh=0.5)
        v = self.op_contract(x, batch=len(x.shape) - 2)
        for _ in range(self.ch.int(1, 2)):
            if v is None or not v.shape:
                return v
            # mostly matmul-like steps (the chains the search reorders), sometimes any einsum
            v = self.op_contract(v, batch=len(v.shape) - 2) if len(v.shape) >= 2 and \
                not self.ch.flag(0.3) else self.op_contract(v)
        return v

    def op_batched(self) -> Value | None:
        """A batched matmul over heads merged into the batch: [B1, B2, m, k] (maybe transposed
        from [B1, m, B2, k] as attention's heads are) collapsed to [B1*B2, m, k] by a view,
        then contracted: what sft-expand-batch rewrites."""
        b1, b2, m, k = (self.ch.pick(self.sizes[:6]) for _ in range(4))
        if self.ch.flag(0.5):
            x = self.arg((b1, m, b2, k))
            x = self.view_op(x, (b1, b2, m, k), ["d0", "d2", "d1", "d3"], None, "view-transpose")
        else:
            x = self.arg((b1, b2, m, k))
        merged = self.view_op(x, (b1 * b2, m, k), [f"d0 floordiv {b2}", f"d0 mod {b2}", "d1", "d2"],
                              None, "view-collapse")
        return self.op_contract(merged, batch=1)

    # -- the whole program ---------------------------------------------------------------------

    def build(self) -> Program:
        # weighted by repetition: contractions are what the plans act on
        makers = (self.op_contract, self.op_map, self.op_chain, self.op_reduce, self.op_view,
                  self.op_contract, self.op_batched, self.op_map, self.op_view, self.op_reduce,
                  self.op_chain, self.op_iota)
        boundaries = []  # entries of self.lines after each maker: where a callee may end
        for _ in range(self.ch.int(1, self.max_ops)):
            self.ch.pick(makers)()
            boundaries.append(len(self.lines))
        if not self.values:
            self.op_map()
        outs = [self.values[-1]]
        for v in self.values[:-1]:
            if self.ch.flag(0.15):
                outs.append(v)
        returned = [v.name for v in outs]
        for name in self.const_view_sources:  # read by a constant-index view and by more
            uses = sum(len(re.findall(re.escape(name) + r"\b(?! =)", l)) for l in self.lines)
            if uses + returned.count(name) > 1:
                self.features.add("const-view-of-shared-value")
        inner = [b for b in boundaries if 0 < b < len(self.lines)]
        split = self.ch.pick(inner) if inner and self.ch.flag(P_CALLEE) else None
        text = function_text(self, "main", self.lines, outs) if split is None else outlined(self, split, outs)
        dtype = NP_TYPES[self.dtype]
        return Program(text, self.dtype, [a.ref.astype(dtype) for a in self.args],
                       [v.ref for v in outs], [v.err for v in outs], list(self.kinds), set(self.features))


def generate(ch: Chooser, dtype: str | None = None, max_ops: int = 5,
             sizes: tuple[int, ...] = SIZES, summed_last: bool = False) -> Program:
    """One random program (f64 for a fifth of them unless `dtype` says), its dims drawn from
    `sizes`; with `summed_last` every contraction sums over its innermost loops. A campaign
    aimed at kernel configs (a GPU's) passes powers of two and summed_last: the tiles divide
    such extents, and sft tiles only kernels whose summed loops are innermost."""
    return Builder(ch, dtype, max_ops, sizes, summed_last).build()
