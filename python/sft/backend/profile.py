"""What IREE makes of a program before code generation: its dispatches, the bytes each one
touches and the lowering config IREE's heuristics chose for it.

Read from `iree-compile --compile-to=executable-configurations`, as text (no MLIR bindings):
the dispatch function names carry the root op kind and its loop extents
(`main_dispatch_3_matmul_64x384x128_f32`), the binding subspans the buffers it reads and writes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_FUNC = re.compile(r"func\.func @\w+_dispatch_(\d+)_(\w+?)\(")
_DIMS = re.compile(r"_(\d+(?:x\d+)+)(?:_|x[a-z]|$)")
_BUFFER = re.compile(r"hal\.interface\.binding\.subspan.*?: memref<((?:\d+x)+)([a-z]+)(\d+)")
_CONFIG = re.compile(r"lowering_config<distribution = \[([\d, ]*)\], vector_common_parallel = "
                     r"\[([\d, ]*)\], vector_reduction = \[([\d, ]*)\]>")
_MAP = re.compile(r"affine_map<(\([^)]*\) -> \([^)]*\))>")
CONTRACTION_WORDS = ("matmul", "mmt4d", "conv", "contract")
# Named ops print no indexing maps: theirs are implied.
_IMPLIED_MAPS = {
    "linalg.matmul": ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
    "linalg.batch_matmul": ("(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
                            "(d0, d1, d2, d3) -> (d0, d1, d2)"),
}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


@dataclass(frozen=True)
class Dispatch:
    index: int
    name: str                         # root op kind and extents, as IREE names the dispatch
    dims: tuple[int, ...]             # the root op's loop extents (empty when not in the name)
    bytes: int                        # total size of the buffers bound to it
    config: tuple[tuple[int, ...], ...] | None  # (distribution, vector parallel, vector reduction)
    maps: tuple[str, ...] = ()        # the root op's indexing maps, as IREE holds them

    @property
    def is_contraction(self) -> bool:
        return any(word in self.name for word in CONTRACTION_WORDS)

    @property
    def flops(self) -> float:
        """2 x the iteration space for a contraction (each point is one multiply-add)."""
        return 2.0 * math.prod(self.dims) if self.is_contraction and self.dims else 0.0


@dataclass(frozen=True)
class Profile:
    dispatches: tuple[Dispatch, ...]
    dispatch_count: int               # dispatches executed (executables may be shared)

    def contraction(self, dims: tuple[int, ...]) -> Dispatch | None:
        return next((d for d in self.dispatches if d.is_contraction and d.dims == dims), None)


def parse_profile(text: str) -> Profile:
    dispatches, current = [], None

    def close():
        if current is not None:
            dispatches.append(Dispatch(**current))

    for line in text.splitlines():
        func = _FUNC.search(line)
        if func:
            close()
            dims = _DIMS.search(func.group(2) + "_")
            current = dict(index=int(func.group(1)), name=func.group(2),
                           dims=tuple(int(x) for x in dims.group(1).split("x")) if dims else (),
                           bytes=0, config=None, maps=())
            continue
        if current is None:
            continue
        buffer = _BUFFER.search(line)
        if buffer:
            shape = [int(x) for x in buffer.group(1).rstrip("x").split("x")]
            current["bytes"] += math.prod(shape) * max(1, int(buffer.group(3)) // 8)
        config = _CONFIG.search(line)
        if config and current["config"] is None and any(_ints(config.group(3))):
            current["config"] = tuple(_ints(config.group(i)) for i in (1, 2, 3))
            op = re.search(r"= (linalg\.\w+)", line)
            current["maps"] = tuple(_MAP.findall(line)) or _IMPLIED_MAPS.get(op.group(1) if op else "", ())
    close()
    count = max((d.index for d in dispatches), default=-1) + 1
    return Profile(tuple(dispatches), count)
