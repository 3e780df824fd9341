"""The fuzzer's view ops (transpose, broadcast, constant index, expand, collapse, slice, pad):
one `sft.view` each, its numpy meaning a gather over the index map. A part of `programs.Builder`,
whose names, constants and values it uses."""

from __future__ import annotations

from .values import Value, amap, gather, identity, ttype

MAX_RANK = 4


class ViewOps:
    def view_op(self, x: Value, shape, exprs, pad: float | None, kind: str) -> Value:
        name = self.fresh()
        pad_name = f", {self.const(pad)}" if pad is not None else ""
        pad_type = f", {self.dtype}" if pad is not None else ""
        text = (f"  {name} = \"sft.view\"({x.name}{pad_name}) {{map = {amap(len(shape), exprs)}}} : "
                f"({ttype(x.shape, self.dtype)}{pad_type}) -> {ttype(shape, self.dtype)}")
        fill = 0.0 if pad is None else pad
        return self.emit(text, shape, gather(x.ref, exprs, shape, fill), gather(x.err, exprs, shape),
                         gather(x.mag, exprs, shape, abs(fill)), kind)

    def op_view(self) -> Value | None:
        x = self.value(min_rank=1)
        s, r = list(x.shape), len(x.shape)
        kind = self.ch.pick(("transpose", "broadcast", "const", "expand", "collapse", "slice", "pad"))
        j = self.ch.int(0, r - 1)
        exprs = identity(r)
        pad = None
        if kind == "transpose" and r >= 2:
            perm = list(range(r))
            self.shuffle(perm)
            shape = [s[p] for p in perm]                 # result dim i is source dim perm[i]
            exprs = [f"d{perm.index(q)}" for q in range(r)]
        elif kind == "broadcast" and r < MAX_RANK:
            at = self.ch.int(0, r)
            shape = s[:at] + [self.ch.pick(self.sizes[:6])] + s[at:]
            exprs = [f"d{q if q < at else q + 1}" for q in range(r)]
        elif kind == "const":                            # e.g. (d0, d1, d2) -> (d0, d1, 0)
            shape = list(s)
            shape[j] = self.ch.pick(self.sizes[:6])
            exprs[j] = str(self.ch.int(0, s[j] - 1))
        elif kind == "expand" and r < MAX_RANK:
            parts = [(a, s[j] // a) for a in range(1, s[j] + 1) if s[j] % a == 0]
            a, b = self.ch.pick(parts)
            shape = s[:j] + [a, b] + s[j + 1:]
            # row-major, as tensor.expand_shape reads: (a, 1) gives d_j + d_j+1, (1, b) d_j+1
            split = f"d{j + 1}" if a == 1 else (f"d{j} + d{j + 1}" if b == 1 else f"d{j} * {b} + d{j + 1}")
            exprs = [f"d{q}" for q in range(j)] + [split] + [f"d{q + 1}" for q in range(j + 1, r)]
        elif kind == "collapse" and r >= 2:
            j = min(j, r - 2)
            a, b = s[j], s[j + 1]
            shape = s[:j] + [a * b] + s[j + 2:]
            exprs = [f"d{q}" for q in range(j)] + [f"d{j} floordiv {b}", f"d{j} mod {b}"] + \
                [f"d{q - 1}" for q in range(j + 2, r)]
        elif kind == "slice" and s[j] >= 2:
            stride = self.ch.int(1, 3)
            offset = self.ch.int(0, s[j] - 1)
            size = self.ch.int(1, (s[j] - 1 - offset) // stride + 1)
            shape = list(s)
            shape[j] = size
            exprs[j] = f"d{j}" + (f" * {stride}" if stride > 1 else "") + (f" + {offset}" if offset else "")
        elif kind == "pad":
            lo, hi = self.ch.int(0, 2), self.ch.int(0, 2)
            if lo == hi == 0:
                hi = 1
            shape = list(s)
            shape[j] += lo + hi
            exprs[j] = f"d{j} - {lo}" if lo else f"d{j}"
            pad = self.ch.pick((0.0, 1.0, -2.0))
        else:
            return None
        if kind == "const":
            self.const_view_sources.append(x.name)
        return self.view_op(x, shape, exprs, pad, f"view-{kind}")
