"""The CPU kernel decision: tile sizes for a contraction root on IREE's llvm-cpu pipeline.

Its forms: a candidate row (dm, dn, vm, vn, vk: distribution tiles on m and n, the register
block vm x vn, the reduction step vk; all zeros for IREE's own choice), a `TileConfig` (one
entry per loop of the root op, at each level IREE exposes), the `#iree_codegen.compilation_info`
text, and IREE's own config as the profile parsed it (`levels_of_iree`, read back into a row by
`row_of_iree`). Loops are named by their roles: "m", "n", "k", "b" (batch, tiled by 1).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

ROW = ("dm", "dn", "vm", "vn", "vk")
# IREE's CPU choice for a matmul when its own config cannot be read: what it picks for the
# shapes of the suite on AVX-512 (distribution 32x64, vector 8x16, reduction 16).
IREE_DEFAULT = (32, 64, 8, 16, 16)
_LEVELS = ("distribution", "vector_common_parallel", "vector_reduction")


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes at each level IREE's CPU pipeline exposes, one entry per loop of the root op."""

    distribution: tuple[int, ...]
    vector_common_parallel: tuple[int, ...]
    vector_reduction: tuple[int, ...]
    pipeline: str = "DoubleTilingExpert"

    def attribute(self) -> str:
        """The #iree_codegen.compilation_info text that imposes this config on a linalg op."""
        def ints(xs):
            return "[" + ", ".join(map(str, xs)) + "]"
        return ("#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
                f"distribution = {ints(self.distribution)}, "
                f"vector_common_parallel = {ints(self.vector_common_parallel)}, "
                f"vector_reduction = {ints(self.vector_reduction)}>, "
                "translation_info = #iree_codegen.translation_info<pipeline = "
                f"#iree_cpu.pipeline<{self.pipeline}>>>")

    def to_dict(self) -> dict:
        """The config as JSON-able data (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, value, what: str = "config") -> "TileConfig":
        """The config `to_dict` wrote; anything else is a ValueError or TypeError naming `what`
        and the key."""
        known = {f.name for f in fields(cls)}
        if not isinstance(value, dict):
            raise TypeError(f"{what} must be an object with keys {sorted(known)}, not {json.dumps(value)}")
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown key '{what}.{unknown[0]}' (known: {', '.join(sorted(known))})")
        missing = sorted(k for k in known - set(value) if k != "pipeline")
        if missing:
            raise ValueError(f"'{what}' has no '{missing[0]}'")
        pipeline = value.get("pipeline", cls.pipeline)
        if not isinstance(pipeline, str):
            raise TypeError(f"{what}.pipeline must be a string, not {json.dumps(pipeline)}")
        levels = []
        for key in _LEVELS:
            level = value[key]
            if not isinstance(level, list) or not all(type(x) is int for x in level):
                raise TypeError(f"{what}.{key} must be a list of integers, not {json.dumps(level)}")
            levels.append(tuple(level))
        return cls(*levels, pipeline)


def config_of_row(roles: tuple[str, ...], row) -> TileConfig | None:
    """The TileConfig of a candidate row for a kernel of these loop roles; None for the zero
    row (IREE's default)."""
    dm, dn, vm, vn, vk = (int(x) for x in row)
    if not any((dm, dn, vm, vn, vk)):
        return None
    dist, par, red = [], [], []
    for role in roles:
        dist.append({"m": dm, "n": dn, "b": 1}.get(role, 0))
        par.append({"m": vm, "n": vn, "b": 1}.get(role, 0))
        red.append(vk if role == "k" else 0)
    return TileConfig(tuple(dist), tuple(par), tuple(red))


def levels_of_iree(lowering_config: dict) -> tuple[tuple[int, ...], ...] | None:
    """(distribution, vector parallel, vector reduction) of IREE's config for a CPU root op, from
    its lowering config's fields as the profile parsed them (`profile.parse_lowering_config`:
    each form IREE prints for a host, or the older `tile_sizes = [[...], ...]`); None when the
    config has no reduction level (not a contraction's) or is in no CPU form."""
    if "tile_sizes" in lowering_config:  # [[distribution], [parallel], [reduction], ...]
        lowering_config = dict(zip(_LEVELS, lowering_config["tile_sizes"]))
    levels = [lowering_config.get(k) for k in _LEVELS]
    if any(not isinstance(v, tuple) or not all(isinstance(x, int) for x in v) for v in levels):
        return None
    return tuple(levels) if any(levels[2]) else None


def row_of_iree(roles: tuple[str, ...], levels) -> tuple[int, ...]:
    """IREE's own config (`levels_of_iree`'s levels, None when unknown) as a candidate row;
    `IREE_DEFAULT` when it is unknown or not of these roles."""
    if levels and len(levels[0]) == len(roles):
        dist, par, red = levels
        pick = {}
        for i, role in enumerate(roles):
            if role in "mn":
                pick["d" + role], pick["v" + role] = max(dist[i], 1), max(par[i], 1)
            elif role == "k":
                pick["vk"] = max(red[i], 1)
        if len(pick) == 5:
            return tuple(pick[f] for f in ROW)
    return IREE_DEFAULT
