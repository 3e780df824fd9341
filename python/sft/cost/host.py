"""What this machine's CPU is, read from it (never assumed): the vector ISA IREE generates code
for, hence the vector width, the number of vector registers and IREE's vector-size limit.

`SFT_HOST_CPU` (an LLVM CPU name, as `--iree-llvmcpu-target-cpu` takes) makes IREE generate
code for another CPU model; the description then follows that model.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

# LLVM CPU names whose widest vectors are 512 bits (the rest of x86-64 named here: 256).
_AVX512_CPUS = {"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                "icelake-server", "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids",
                "znver4", "znver5", "x86-64-v4"}
_AVX2_CPUS = {"haswell", "broadwell", "skylake", "alderlake", "raptorlake", "znver1", "znver2",
              "znver3", "x86-64-v3"}
# IREE's CPU codegen refuses vector ops larger than this many native vectors
# (`--iree-llvmcpu-max-allowed-number-of-native-vectors`, default 512): 32 KiB on AVX-512,
# 16 KiB on AVX2.
MAX_NATIVE_VECTORS = 512


@dataclass(frozen=True)
class HostISA:
    name: str                # "avx512", "avx2", "sse" or "neon"
    vector_bytes: int        # width of the widest vector registers IREE uses
    vector_registers: int    # architectural vector registers

    @property
    def lanes_f32(self) -> int:
        return self.vector_bytes // 4

    @property
    def max_vector_op_bytes(self) -> int:
        return MAX_NATIVE_VECTORS * self.vector_bytes


AVX512 = HostISA("avx512", 64, 32)
AVX2 = HostISA("avx2", 32, 16)
SSE = HostISA("sse", 16, 16)
NEON = HostISA("neon", 16, 32)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


@functools.cache
def host_isa() -> HostISA:
    """The vector ISA of the code IREE generates for `host`."""
    cpu = os.environ.get("SFT_HOST_CPU", "host")
    if cpu in _AVX512_CPUS:
        return AVX512
    if cpu in _AVX2_CPUS:
        return AVX2
    flags = _cpu_flags()
    if cpu == "host":
        if "avx512f" in flags:
            return AVX512
        if "avx2" in flags:
            return AVX2
        if "asimd" in flags or os.uname().machine in ("aarch64", "arm64"):
            return NEON
    return SSE  # an unknown model: the narrowest vectors, whose limits every x86 CPU meets


@dataclass(frozen=True)
class HostCaches:
    """Data cache sizes in bytes as one core sees them: L1 and L2 per core (a cache shared by
    several cores counts its share), the last level for the whole chip; and L1's associativity
    (lines of one set: rows whose stride is a multiple of L1's set span all land in one set)."""

    l1_bytes: int
    l2_bytes: int
    last_level_bytes: int
    l1_ways: int = 8


# What the cost model assumes where the machine does not say (no sysfs, a container hiding it).
DEFAULT_CACHES = HostCaches(32 * 1024, 1024 * 1024, 8 * 1024 * 1024)
_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def _size(text: str) -> int:
    text = text.strip()
    return int(text[:-1]) * _UNITS[text[-1]] if text[-1:] in _UNITS else int(text)


def _cpu_count(cpu_list: str) -> int:
    """CPUs in a sysfs list such as `0-3,8`."""
    count = 0
    for part in cpu_list.strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def read_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> HostCaches:
    """The data caches of CPU 0 from sysfs (`index*/level, type, size, shared_cpu_list`); the
    defaults for what is not there or does not read."""
    per_core: dict[int, int] = {}
    whole: dict[int, int] = {}
    ways = DEFAULT_CACHES.l1_ways
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _size((index / "size").read_text())
            sharing = _cpu_count((index / "shared_cpu_list").read_text())
        except (OSError, ValueError, KeyError):
            continue
        per_core[level], whole[level] = size // max(sharing, 1), size
        if level == 1:
            try:
                ways = int((index / "ways_of_associativity").read_text()) or ways
            except (OSError, ValueError):
                pass
    if 1 not in per_core:
        return DEFAULT_CACHES
    last = max(whole)
    return HostCaches(per_core[1], per_core.get(2, DEFAULT_CACHES.l2_bytes),
                      whole[last] if last >= 2 else DEFAULT_CACHES.last_level_bytes, ways)


def host_cores() -> int:
    """Cores this process may run on (its affinity mask: a container or `taskset` limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.cache
def cpu_signature() -> str:
    """A short hash of this CPU's model name and feature flags (/proc/cpuinfo): what LLVM's
    `host` CPU resolves to, so that code built for one machine is not reused on another."""
    import hashlib

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = os.uname().machine
    name = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), "")
    return hashlib.sha256(f"{name}|{sorted(_cpu_flags())}".encode()).hexdigest()[:12]
