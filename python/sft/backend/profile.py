"""What IREE makes of a program before code generation: its dispatches, the bytes each one
touches and the lowering config IREE's heuristics chose for it.

Read from `iree-compile --compile-to=executable-configurations`, as text (no MLIR bindings):
the dispatch function names carry the root op kind and its loop extents
(`main_dispatch_3_matmul_64x384x128_f32`), the binding subspans the buffers it reads and writes.
On a GPU target a contraction's config is also kept whole, as JSON-able data (`Dispatch.gpu`):
the translation info on the dispatch function (pipeline, workgroup_size, subgroup_size, the
prefetch or pipeline depth) and the fields of the root op's lowering config.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field

from ..decisions.cpu_tiles import levels_of_iree
from ..syntax import split_top_level

# A dispatch function: the program's own (`main_dispatch_3_matmul_64x384x128_f32`), or one of
# data tiling's packs and unpacks (`_encoding_0_encode_8x256xf32_to_8x256xf32`), numbered apart.
_FUNC = re.compile(r"func\.func @\w*?_(dispatch|encoding)_(\d+)_(\w+?)\(")
_DIMS = re.compile(r"_(\d+(?:x\d+)+)(?:_|x[a-z]|$)")
_BUFFER = re.compile(r"hal\.interface\.binding\.subspan.*?: memref<((?:\d+x)+)([a-z]+)(\d+)")
_CONFIG_START = re.compile(r"lowering_config<")
_GPU_PIPELINE = re.compile(r"pipeline = #iree_gpu\.(?:spirv_)?pipeline<(\w+)>")
_TRANSLATION_INTS = {"subgroup_size": re.compile(r"subgroup_size = (\d+)"),
                     "prefetch_num_stages": re.compile(r"prefetch_num_stages = (\d+)"),
                     "pipeline_depth": re.compile(r"pipeline_depth = (\d+)"),
                     "store_stage": re.compile(r"store_stage = (\d+)")}
_WORKGROUP_SIZE = re.compile(r"workgroup_size = \[([\d, ]+)\]")
_MMA_LAYOUT = re.compile(r"^#iree_gpu\.(?:mma_layout|virtual_mma_layout)<(\w+)>$")
_MAP = re.compile(r"affine_map<(\([^)]*\) -> \([^)]*\))>")
CONTRACTION_WORDS = ("matmul", "mmt4d", "conv", "contract")
# Dispatches that only move a tensor into another layout (a transpose, data tiling's packs)
RELAYOUT_PREFIXES = ("transpose", "elementwise_transpose", "encode", "decode", "unset_encoding",
                     "pack", "unpack")
ONE_WORKGROUP_BYTES = 4096  # a dispatch touching less runs as one workgroup (`Profile.split_count`)
# Named ops print no indexing maps: theirs are implied.
_IMPLIED_MAPS = {
    "linalg.matmul": ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
    "linalg.batch_matmul": ("(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
                            "(d0, d1, d2, d3) -> (d0, d1, d2)"),
}


def _bracketed(text: str, start: int, open_: str = "<", close: str = ">") -> int:
    """Index just past the bracket that closes the one opened at `text[start]`."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] in open_
        depth -= text[i] in close
        if depth == 0:
            return i + 1
    return len(text)


def _split_top(text: str) -> list[str]:
    return split_top_level(text, "<[({", ">])}")


def parse_lowering_config(body: str) -> dict[str, object]:
    """The fields of a lowering config's body as IREE prints it, read structurally:
    `cache_parallel = [32, 64, 0], distribution = [...], ...` (CPU, each form IREE prints for a
    host), `tile_sizes = [[...], [...]]` (the older codegen form), `{workgroup = [...], ...}`
    (GPU). Integer lists become tuples of ints (nested lists, tuples of tuples); anything else
    stays text."""
    body = body.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    fields = {}
    for item in _split_top(body):
        name, _, value = item.partition("=")
        fields[name.strip()] = _value(value.strip())
    return fields


def _value(text: str):
    if text.startswith("[") and text.endswith("]"):
        items = _split_top(text[1:-1])
        try:
            return tuple(_value(i) if i.startswith("[") else int(i) for i in items)
        except ValueError:
            return text
    return text


def gpu_translation(line: str) -> dict | None:
    """The GPU translation info on a dispatch function's line: {"pipeline": "TileAndFuse",
    "workgroup_size": [128, 1, 1], "subgroup_size": 32, "prefetch_num_stages": 2} (and
    pipeline_depth / store_stage for SPIR-V); None when the line names no GPU pipeline."""
    pipeline = _GPU_PIPELINE.search(line)
    if pipeline is None:
        return None
    info: dict = {"pipeline": pipeline.group(1)}
    size = _WORKGROUP_SIZE.search(line)
    if size:
        info["workgroup_size"] = [int(x) for x in size.group(1).split(",")]
    for name, pattern in _TRANSLATION_INTS.items():
        found = pattern.search(line)
        if found:
            info[name] = int(found.group(1))
    return info


def gpu_lowering_config(fields: dict) -> dict:
    """A GPU lowering config's fields (from parse_lowering_config) as JSON-able values: integer
    tuples become (nested) lists, `mma_kind` the intrinsic's name, a unit attribute
    (`convert_acc_gemm`) True, anything else its text."""
    def plain(value):
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if value == "":
            return True
        found = _MMA_LAYOUT.match(value) if isinstance(value, str) else None
        return found.group(1) if found else value
    return {name: plain(value) for name, value in fields.items()}


def _is_gpu_contraction(fields: dict) -> bool:
    """Whether a GPU lowering config is a contraction root's: a reduction level with a step."""
    levels = fields.get("tile_sizes")
    if isinstance(levels, tuple):  # SPIR-V: the k step is in the last entry of some level
        return any(isinstance(lv, tuple) and len(lv) > 2 and lv[-1] for lv in levels)
    reduction = fields.get("reduction")
    return isinstance(reduction, tuple) and any(isinstance(x, int) and x for x in reduction)


@dataclass(frozen=True)
class Dispatch:
    index: int
    name: str                         # root op kind and extents, as IREE names the dispatch
    dims: tuple[int, ...]             # the root op's loop extents (empty when not in the name)
    bytes: int                        # total size of the buffers bound to it
    config: tuple[tuple[int, ...], ...] | None  # (distribution, vector parallel, vector reduction)
    maps: tuple[str, ...] = ()        # the root op's indexing maps, as IREE holds them
    # Bytes of the tensors an elementwise op fused into a contraction's dispatch reads or writes
    # transposed (through a permutation of its loops): they move in the contraction's tile
    # order, across rows (`cost.model.transposed_seconds`).
    transposed_bytes: int = 0
    # Its body's work over those ops: their iteration space times the ops computed a point (not
    # constants): AdamW's update is 15, SGD-momentum's 4 (`TargetDesc.transposed_op_seconds`).
    transposed_work: int = 0
    # Its root is IREE's packed contraction (data tiling: `linalg.mmt4d`).
    packed: bool = False
    # A packed contraction's inner tile (m0, n0, k0): its `dims` are the matmul's, padded up to
    # it (`mmt4d_2x64x256x16x16x1` is a 32x1024x256 matmul, or one of 17-32 rows)
    inner: tuple[int, ...] = ()
    # GPU targets, contractions: {"pipeline", "workgroup_size", "subgroup_size", ...,
    # "lowering_config": {field: value}}, JSON-able (see gpu_translation, gpu_lowering_config).
    gpu: dict | None = field(default=None, hash=False)

    @property
    def is_contraction(self) -> bool:
        return any(word in self.name for word in CONTRACTION_WORDS)

    @property
    def is_relayout(self) -> bool:
        """It moves a tensor into another layout (reading or writing it across its rows): a
        transpose, data tiling's packs and unpacks, and what IREE fuses into them."""
        return self.name.startswith(RELAYOUT_PREFIXES) or self.name.endswith("_pack")

    @property
    def flops(self) -> float:
        """2 x the iteration space for a contraction (each point is one multiply-add)."""
        return 2.0 * math.prod(self.dims) if self.is_contraction and self.dims else 0.0


@dataclass(frozen=True)
class Profile:
    dispatches: tuple[Dispatch, ...]
    dispatch_count: int               # dispatches executed (executables may be shared)

    @property
    def split_count(self) -> int:
        """Dispatches executed that IREE's parallel executor splits among its workers: all but
        those touching under `ONE_WORKGROUP_BYTES` (a training step's scalar and index
        bookkeeping; IREE splits even a 16 KiB reduction into 8 workgroups). Only a split
        dispatch makes the workers meet (`calibrate.measure_host`: a one-workgroup chain reads
        no cost a dispatch, a split one 13-21 us on a 2-core VM)."""
        return self.dispatch_count - sum(d.bytes < ONE_WORKGROUP_BYTES for d in self.dispatches)

    def contractions(self, dims: tuple[int, ...]) -> list[Dispatch]:
        """The contraction dispatches of loop extents `dims` (a packed one's padded to its inner
        tile), in dispatch order."""
        return [d for d in self.dispatches if d.is_contraction and d.dims in (dims, _padded(dims, d.inner))]

    def contraction(self, dims: tuple[int, ...]) -> Dispatch | None:
        return next(iter(self.contractions(dims)), None)

    def to_json(self) -> str:
        """The profile as JSON (what the module cache stores instead of the configured IR)."""
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | bytes) -> "Profile":
        """The profile `to_json` wrote; anything else raises ValueError, KeyError or TypeError."""
        data = json.loads(text)

        def ints(xs) -> tuple[int, ...]:
            if not isinstance(xs, list) or not all(type(x) is int for x in xs):
                raise TypeError(f"not a list of integers: {xs!r}")
            return tuple(xs)

        def dispatch(d: dict) -> Dispatch:
            if not (type(d["index"]) is int and isinstance(d["name"], str) and type(d["bytes"]) is int
                    and isinstance(d["maps"], list) and all(isinstance(m, str) for m in d["maps"])):
                raise TypeError(f"not a dispatch: {d!r}")
            config = None if d["config"] is None else tuple(ints(level) for level in d["config"])
            gpu = d.get("gpu")  # absent from profiles written before GPU configs were kept
            if gpu is not None and not isinstance(gpu, dict):
                raise TypeError(f"not a GPU config: {gpu!r}")
            transposed = d.get("transposed_bytes", 0)  # absent from profiles written before
            if type(transposed) is not int:
                raise TypeError(f"transposed_bytes {transposed!r}")
            work = d.get("transposed_work", 0)
            if type(work) is not int:
                raise TypeError(f"transposed_work {work!r}")
            packed = d.get("packed", False)
            if type(packed) is not bool:
                raise TypeError(f"packed {packed!r}")
            return Dispatch(d["index"], d["name"], ints(d["dims"]), d["bytes"], config, tuple(d["maps"]),
                            transposed_bytes=transposed, transposed_work=work, packed=packed,
                            inner=ints(d.get("inner", [])), gpu=gpu)

        count = data["dispatch_count"]
        if type(count) is not int:
            raise TypeError(f"dispatch_count {count!r}")
        return Profile(tuple(dispatch(d) for d in data["dispatches"]), count)


_TENSOR = re.compile(r"tensor<((?:\d+x)+)[a-z]+(\d+)>")


def transposed_operands(line: str) -> tuple[int, int]:
    """(bytes, points) of a linalg.generic's operands (the line IREE prints its header on) that
    it indexes through a permutation of all its loops other than the identity, the tensors it
    walks across their rows, and the points of its iteration space (0, 0 where none is)."""
    maps = _MAP.findall(line)
    start = line.find("ins(")
    if not maps or start < 0:
        return 0, 0
    operands = _TENSOR.findall(line[start:])
    total, points = 0, 0
    for text, (shape, bits) in zip(maps, operands):
        dims, results = (part.strip(" ()") for part in text.split("->"))
        loops, read = [d.strip() for d in dims.split(",")], [r.strip() for r in results.split(",")]
        if sorted(read) == sorted(loops) and read != loops:
            points = math.prod(int(x) for x in shape.rstrip("x").split("x"))
            total += points * max(1, int(bits) // 8)
    return total, points


_BODY_OP = re.compile(r"= (?:arith\.(?!constant)|math\.)\w+")


def _padded(dims: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...] | None:
    """A matmul's (batch..., M, N, K) rounded up to a packed inner tile (m0, n0, k0)."""
    if not inner or len(dims) < len(inner):
        return None
    tiles = (1,) * (len(dims) - len(inner)) + inner
    return tuple(-(-x // t) * t for x, t in zip(dims, tiles))


def _unpacked(name: str, dims: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the matmul's padded extents, the inner tile) of IREE's packed contraction named
    `name` with extents `dims` (batch..., M1, N1, K1, m0, n0, k0); anything else as it is."""
    if not name.startswith(("mmt4d", "batch_mmt4d")) or len(dims) < 6:
        return dims, ()
    *batch, m1, n1, k1, m0, n0, k0 = dims
    return (*batch, m1 * m0, n1 * n0, k1 * k0), (m0, n0, k0)


def parse_profile(text: str) -> Profile:
    """The dispatches of `iree-compile --compile-to=executable-configurations` output."""
    dispatches, current, translation, contraction = [], None, None, False
    points = 0  # the iteration space of the transposed generic whose body is being read

    def close():
        if current is not None:
            current["dims"], current["inner"] = _unpacked(current["name"], current["dims"])
            dispatches.append(Dispatch(**current))

    for line in text.splitlines():
        func = _FUNC.search(line)
        if func:
            close()
            kind, number, name = func.groups()
            dims = _DIMS.search(name + "_")
            current = dict(index=int(number) if kind == "dispatch" else -1 - int(number), name=name,
                           dims=tuple(int(x) for x in dims.group(1).split("x")) if dims else (),
                           bytes=0, config=None, maps=(), gpu=None, transposed_bytes=0,
                           transposed_work=0, packed=False, inner=())
            translation = gpu_translation(line)
            contraction = any(word in current["name"] for word in CONTRACTION_WORDS)
            points = 0
            continue
        if current is None:
            continue
        if contraction and "linalg.generic" in line:
            moved, points = transposed_operands(line)
            current["transposed_bytes"] += moved
        elif points and "linalg.yield" in line:
            points = 0  # the transposed generic's body ends
        elif points and _BODY_OP.search(line):
            current["transposed_work"] += points
        current["packed"] |= "linalg.mmt4d" in line or "linalg.batch_mmt4d" in line
        buffer = _BUFFER.search(line)
        if buffer:
            shape = [int(x) for x in buffer.group(1).rstrip("x").split("x")]
            current["bytes"] += math.prod(shape) * max(1, int(buffer.group(3)) // 8)
        start = _CONFIG_START.search(line)
        config, fields = None, None
        if start and (current["config"] is None or (translation and current["gpu"] is None)):
            end = _bracketed(line, start.end() - 1)
            fields = parse_lowering_config(line[start.end():end - 1])
            config = levels_of_iree(fields) if current["config"] is None else None
        gpu_root = (translation is not None and contraction and current["gpu"] is None
                    and fields is not None and _is_gpu_contraction(fields))
        if gpu_root:
            current["gpu"] = {**translation, "lowering_config": gpu_lowering_config(fields)}
        if config is not None:
            current["config"] = config
        if config is not None or gpu_root:
            op = re.search(r"= (linalg\.\w+)", line)
            current["maps"] = tuple(_MAP.findall(line)) or _IMPLIED_MAPS.get(op.group(1) if op else "", ())
    close()
    # the program's dispatches are numbered from 0, data tiling's encodings (negative here) apart
    count = max((d.index for d in dispatches), default=-1) + 1 + sum(d.index < 0 for d in dispatches)
    return Profile(tuple(dispatches), count)
