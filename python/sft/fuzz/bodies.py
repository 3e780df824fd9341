"""The fuzzer's scalar bodies: a random arith/math expression over a map's or reduction's block
arguments, each step with its exact value and its error bound (`values.Node`). A part of
`programs.Builder`, whose names, constants and chooser it uses."""

from __future__ import annotations

import numpy as np

from .values import EPS, Node

MATH_ULPS = 16.0                       # error allowed for exp and tanh, in ulps of the result


class ScalarBodies:
    def body(self, nodes: list[Node], domain, max_ops: int) -> tuple[list[str], Node]:
        """A random arith/math expression over `nodes` (the block arguments); returns its lines
        and the node it yields."""
        lines, nodes, t = [], list(nodes), self.dtype
        for _ in range(self.ch.int(0, max_ops)):
            a = nodes[-1 - self.ch.int(0, len(nodes) - 1)]
            b = nodes[-1 - self.ch.int(0, len(nodes) - 1)]
            op = self.ch.pick(("addf", "mulf", "subf", "maximumf", "minimumf", "divf", "negf",
                               "exp", "tanh", "absf", "const", "index"))
            name = self.fresh("s")
            if op in ("addf", "subf"):
                r = a.ref + b.ref if op == "addf" else a.ref - b.ref
                node = Node(name, r, a.err + b.err + np.abs(r), a.mag + b.mag)
                lines.append(f"{name} = arith.{op} {a.name}, {b.name} : {t}")
            elif op == "mulf":
                r = a.ref * b.ref
                node = Node(name, r, np.abs(b.ref) * a.err + np.abs(a.ref) * b.err + np.abs(r), a.mag * b.mag)
                lines.append(f"{name} = arith.mulf {a.name}, {b.name} : {t}")
            elif op in ("maximumf", "minimumf"):
                r = np.maximum(a.ref, b.ref) if op == "maximumf" else np.minimum(a.ref, b.ref)
                node = Node(name, r, np.maximum(a.err, b.err), np.maximum(a.mag, b.mag))
                lines.append(f"{name} = arith.{op} {a.name}, {b.name} : {t}")
            elif op == "divf":
                # a / (1 + b*b): the denominator is at least 1, never 0
                sq, den = self.fresh("s"), self.fresh("s")
                d = 1.0 + b.ref * b.ref
                d_err = 2 * np.abs(b.ref) * b.err + b.ref * b.ref + d
                r = a.ref / d
                node = Node(name, r, a.err / d + np.abs(a.ref) * d_err / (d * d) + np.abs(r), a.mag / d)
                lines += [f"{sq} = arith.mulf {b.name}, {b.name} : {t}",
                          f"{den} = arith.addf {self.const(1.0)}, {sq} : {t}",
                          f"{name} = arith.divf {a.name}, {den} : {t}"]
            elif op == "negf":
                node = Node(name, -a.ref, a.err, a.mag)
                lines.append(f"{name} = arith.negf {a.name} : {t}")
            elif op == "absf":
                node = Node(name, np.abs(a.ref), a.err, a.mag)
                lines.append(f"{name} = math.absf {a.name} : {t}")
            elif op == "exp" and np.abs(a.ref).max(initial=0.0) + EPS[t] * a.err.max(initial=0.0) <= 8.0:
                r = np.exp(a.ref)
                node = Node(name, r, r * (a.err + MATH_ULPS), r)
                lines.append(f"{name} = math.exp {a.name} : {t}")
            elif op in ("exp", "tanh"):  # exp of an unbounded input becomes tanh
                r = np.tanh(a.ref)
                node = Node(name, r, a.err + MATH_ULPS * np.abs(r) + MATH_ULPS * EPS[t], np.abs(r))
                lines.append(f"{name} = math.tanh {a.name} : {t}")
            elif op == "const":
                c = self.ch.pick((0.5, 2.0, -1.0, 3.0))
                node = Node(self.const(c), np.full(tuple(domain), c), np.zeros(tuple(domain)),
                            np.full(tuple(domain), abs(c)))
            else:  # the loop position along a random dim, as a float
                if not domain:
                    continue
                dim = self.ch.int(0, len(domain) - 1)
                i, k = self.fresh("s"), self.fresh("s")
                r = np.indices(tuple(domain))[dim].astype(np.float64)
                node = Node(name, r, np.zeros_like(r), r)
                lines += [f"{i} = \"sft.index\"() {{dim = {dim} : i64}} : () -> index",
                          f"{k} = arith.index_cast {i} : index to i64",
                          f"{name} = arith.sitofp {k} : i64 to {t}"]
            unary = op in ("negf", "absf", "exp", "tanh")
            node.reads_input = op not in ("const", "index") and (a.reads_input or (not unary and b.reads_input))
            nodes.append(node)
        return lines, nodes[-1]

    def region(self, args: list[Node], lines: list[str], result: Node) -> str:
        head = "^bb0(" + ", ".join(f"{a.name}: {self.dtype}" for a in args) + "):\n" if args else ""
        inner = "".join(f"    {l}\n" for l in lines)
        return f"({{\n{head}{inner}    gpu.yield {result.name} : {self.dtype}\n  }})"
