"""The module cache: unwritable or full, corrupt entries, bad compiler output, scratch folders
of killed processes, the size bound, profiles stored parsed."""

import errno
import io
import json
import os
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import sft
from sft import paths
from sft.backend import cache, iree
from sft.backend.profile import Profile
from sft.errors import SftError
from sft.targets import get_target

# A matmul: one contraction dispatch with a lowering config, so its profile has content.
MATMUL = """func.func @main(%a: tensor<16x32xf32>, %b: tensor<32x8xf32>) -> tensor<16x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %m = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %m : tensor<16x8xf32>
}
"""


@pytest.fixture
def cache_at(tmp_path, monkeypatch):
    """Point the cache at a fresh folder (and forget which warnings this process gave)."""
    def point(path):
        monkeypatch.setenv("SFT_CACHE_DIR", str(path))
        monkeypatch.setattr(paths, "_warned", set())
        monkeypatch.setattr(paths, "_swept", set())
        return path
    return point


def _entries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name != "tmp")


def _run_matmul(compiled):
    a, b = np.ones((16, 32), np.float32), np.ones((32, 8), np.float32)
    np.testing.assert_array_equal(compiled(a, b), np.full((16, 8), 32.0, np.float32))


def test_a_real_module_is_an_iree_flatbuffer(cache_at, tmp_path):
    cache_at(tmp_path / "c")
    vmfb = iree.compile_module(MATMUL, get_target("host"), use_cache=False).vmfb
    assert cache.valid_vmfb(vmfb)
    # llvm-cpu modules are a zip (stored) around the FlatBuffer; its identifier says IREE
    body = zipfile.ZipFile(io.BytesIO(vmfb)).read("module.fb") if vmfb[:2] == b"PK" else vmfb
    assert b"IREE" in (body[4:8], body[8:12])
    assert not cache.valid_vmfb(vmfb[: len(vmfb) // 2])  # cut short
    assert not cache.valid_vmfb(b"garbage" * 10)


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_an_unusable_cache_dir_is_skipped_with_one_warning(cache_at, tmp_path, monkeypatch, kind):
    if kind == "file":
        where = tmp_path / "not-a-folder"
        where.write_text("x")
    else:  # read-only: root ignores permissions, so the write itself is refused
        where = tmp_path / "ro"
        where.mkdir()
        real = cache.write_atomic

        def refuse(path, data):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        monkeypatch.setattr(cache, "write_atomic", refuse)
    cache_at(where)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            _run_matmul(sft.compile(MATMUL))
            iree.profile(MATMUL, get_target("host"))
    messages = [str(w.message) for w in caught if "sft cache" in str(w.message)]
    assert len(messages) == 1, messages
    if kind == "file":
        assert where.read_text() == "x"
    else:
        monkeypatch.setattr(cache, "write_atomic", real)
        assert _entries(where) == []


def test_a_full_disk_skips_the_cache_and_leaves_no_temp_files(cache_at, tmp_path, monkeypatch):
    folder = cache_at(tmp_path / "c")
    real_fdopen = os.fdopen

    class Full:
        """A file whose writes fail as on a full disk."""

        def __init__(self, fd, mode):
            self.file = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.os, "fdopen", Full)
    with pytest.warns(UserWarning, match="No space left on device"):
        _run_matmul(sft.compile(MATMUL))
        iree.profile(MATMUL, get_target("host"))
    monkeypatch.setattr(cache.os, "fdopen", real_fdopen)
    assert _entries(folder) == [] and list((folder / "tmp").iterdir()) == []


def test_undecodable_cache_entries_are_treated_as_missing(cache_at, tmp_path):
    folder = cache_at(tmp_path / "c")
    first = iree.profile(MATMUL, get_target("host"))
    iree.compile_module(MATMUL, get_target("host"))
    for entry in folder.glob("*.json"):
        entry.write_bytes(b"\xff\xfe\x00not utf-8 \xc3\x28")
    assert iree.profile(MATMUL, get_target("host")) == first
    again = iree.compile_module(MATMUL, get_target("host"))
    assert cache.valid_vmfb(again.vmfb) and again.dispatch_count == 1
    for entry in folder.glob("*.json"):  # rewritten whole
        json.loads(entry.read_text())


def test_profiles_are_stored_parsed_without_the_program_text(cache_at, tmp_path):
    folder = cache_at(tmp_path / "c")
    found = iree.profile(MATMUL, get_target("host"))
    assert found.contraction((16, 8, 32)) is not None
    assert Profile.from_json(found.to_json()) == found
    stored = list(folder.glob("*.profile.json"))
    assert len(stored) == 1 and not list(folder.glob("*.mlir"))
    assert "func.func" not in stored[0].read_text() and stored[0].stat().st_size < 4096
    with pytest.raises((ValueError, KeyError, TypeError)):
        Profile.from_json('{"dispatches": [{"index": "0"}], "dispatch_count": 1}')


def _fake_compiler(monkeypatch, vmfb: bytes, stats: str):
    """iree-compile that exits 0 having written `vmfb` and `stats`."""
    def run(args, timeout=None):
        out = args[args.index("-o") + 1]
        with open(out, "wb") as f:
            f.write(vmfb)
        for arg in args:
            if arg.startswith("--iree-scheduling-dump-statistics-file="):
                with open(arg.split("=", 1)[1], "w") as f:
                    f.write(stats)
    monkeypatch.setattr(iree, "_run_compile", run)


GOOD_STATS = '{"stream-aggregate": {"execution": {"dispatch-count": 1}}}'


@pytest.mark.parametrize("output", ["truncated", "garbage", "empty", "bad-stats", "no-stats-key"])
def test_bad_compiler_output_is_an_error_and_never_cached(cache_at, tmp_path, monkeypatch, output):
    good = iree.compile_module(MATMUL, get_target("host"), use_cache=False).vmfb
    folder = cache_at(tmp_path / "c")
    vmfb, stats = {"truncated": (good[:len(good) // 2], GOOD_STATS), "garbage": (b"\0" * 64, GOOD_STATS),
                   "empty": (b"", GOOD_STATS), "bad-stats": (good, "{"),
                   "no-stats-key": (good, '{"stream-aggregate": {}}')}[output]
    _fake_compiler(monkeypatch, vmfb, stats)
    with pytest.raises(SftError, match="iree-compile exited 0 but wrote no valid"):
        iree.compile_module(MATMUL, get_target("host"))
    assert _entries(folder) == []


def test_a_cut_short_profile_is_an_error_and_never_cached(cache_at, tmp_path, monkeypatch):
    folder = cache_at(tmp_path / "c")

    def run(args, timeout=None):
        with open(args[args.index("-o") + 1], "w") as f:
            f.write("module attributes {stream.affinity.default = #hal.device.affinity<@__dev")
    monkeypatch.setattr(iree, "_run_compile", run)
    with pytest.raises(SftError, match="wrote no valid program"):
        iree.profile(MATMUL, get_target("host"))
    assert _entries(folder) == []


def test_scratch_folders_of_dead_processes_are_removed(cache_at, tmp_path):
    folder = cache_at(tmp_path / "c")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free now (reaped)
    (folder / "tmp").mkdir(parents=True)
    left = folder / "tmp" / f"sft-{dead.pid}-abcd"
    left.mkdir()
    (left / "in.mlir").write_text("x")
    mine = folder / "tmp" / f"sft-{os.getpid()}-live"
    mine.mkdir()
    other = folder / "tmp" / "not-sft"
    other.mkdir()
    with paths.scratch_dir() as scratch:
        assert scratch.parent == folder / "tmp" and scratch.name.startswith(f"sft-{os.getpid()}-")
        (scratch / "f").write_text("x")
    assert not scratch.exists() and not left.exists()
    assert mine.exists() and other.exists()


def test_a_killed_compile_leaves_its_scratch_folder_for_the_next_process(cache_at, tmp_path):
    folder = cache_at(tmp_path / "c")
    code = ("import os, signal; from sft.paths import scratch_dir\n"
            "with scratch_dir() as d:\n    print(d, flush=True); os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "SFT_CACHE_DIR": str(folder)})
    assert proc.returncode == -9
    left = folder / "tmp" / os.path.basename(proc.stdout.strip())
    assert left.is_dir()
    with paths.scratch_dir():
        pass
    assert not left.exists()


def test_the_cache_is_bounded_least_recently_used_first(cache_at, tmp_path, monkeypatch):
    folder = cache_at(tmp_path / "c")
    folder.mkdir()
    (folder / "tuning.sqlite").write_bytes(b"\0" * 5000)
    (folder / "host-calibration.json").write_text("{}" + " " * 5000)
    legacy = folder / ("f" * 32 + ".config.mlir")
    legacy.write_text("weights as text")
    blob = b"IREE" * 250  # 1000 bytes an entry (+ its meta file)
    keys = [f"{i:032x}" for i in range(6)]
    for age, entry_key in enumerate(keys):
        cache.write_module(entry_key, blob, 1)
        for suffix in (".vmfb", ".json"):
            os.utime(folder / (entry_key + suffix), (1000 + age, 1000 + age))
    assert cache.read_module(keys[0]) == (blob, 1)  # a hit: now the most recently used
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "3500")
    cache.evict()
    left = {p.name[:32] for p in folder.glob("*.vmfb")}
    assert left == {keys[0], keys[4], keys[5]}
    assert (folder / "tuning.sqlite").exists() and (folder / "host-calibration.json").exists()
    assert not legacy.exists()
    assert sum(p.stat().st_size for p in folder.iterdir() if p.name[:32] in left) <= 3500


def test_the_size_limit_applies_after_each_write(cache_at, tmp_path, monkeypatch):
    folder = cache_at(tmp_path / "c")
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "1")
    iree.compile_module(MATMUL, get_target("host"))
    iree.profile(MATMUL, get_target("host"))
    assert _entries(folder) == []


def test_an_empty_cache_variable_means_the_default_folder(monkeypatch, tmp_path):
    # `SFT_CACHE_DIR= cmd` in a shell: never the working directory
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(paths.CACHE_ENV, "")
    assert paths.cache_dir() == tmp_path / ".cache" / "sft"


def test_one_program_compiled_twice_is_one_module(cache_at, tmp_path):
    """iree-compile names its input's path in a module's debug information, and each compile
    reads from a scratch folder of its own: the bytes differ, the module digest does not, and
    a flag that changes the code changes it."""
    cache_at(tmp_path / "c")
    target = get_target("host")
    first = iree.compile_module(MATMUL, target, use_cache=False).vmfb
    second = iree.compile_module(MATMUL, target, use_cache=False).vmfb
    assert first != second and cache.module_digest(first) == cache.module_digest(second)
    other = iree.compile_module(MATMUL, target, ("--iree-opt-data-tiling",), use_cache=False)  # any ISA
    assert cache.module_digest(other.vmfb) != cache.module_digest(first)
