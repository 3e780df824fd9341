"""One Target object per name: the registry, the device attribute route (sm_90), every target
compiling, the host read from the machine and the CPU space following the ISA."""

import dataclasses

import numpy as np
import pytest
import torch

import sft
from sft.backend import compile_module
from sft.cost.host import AVX2, AVX512, DEFAULT_CACHES, read_caches
from sft.errors import SftError
from sft.measure import kernel_program
from sft.space.kernels import Kernel
from sft.targets import describe_targets, get_target, target_names
from sft.targets.cpu import CpuCodegen

NAMES = ["host", "cuda:sm_80", "cuda:sm_90", "rocm:gfx942", "vulkan:rdna3", "vulkan:lavapipe"]
MATMUL = Kernel(0, (128, 128, 128), ("m", "n", "k"), 4,
                ("affine_map<(d0, d1, d2) -> (d0, d2)>", "affine_map<(d0, d1, d2) -> (d2, d1)>",
                 "affine_map<(d0, d1, d2) -> (d0, d1)>"))


def test_registry_names_every_target_and_refuses_others():
    assert target_names() == NAMES
    for name in NAMES:
        assert get_target(name).name == name
        assert name in describe_targets()
    with pytest.raises(SftError, match=r"unknown target 'cuda' \(known: host, cuda:sm_80"):
        get_target("cuda")
    with pytest.raises(SftError, match="unknown target"):
        sft.compile(torch.nn.Linear(2, 2), (torch.ones(1, 2),), target="sm_90")



# A whole GPU target, as a new device's module would be: its numbers and its Target, nothing else.
FAKE_GPU = """
from ..cost.hardware import GpuDesc
from .base import Target, gpu_program_desc
from .cuda import SM80
from .gpu import GpuCodegen
import dataclasses

SMALL = dataclasses.replace(SM80, name="small-ampere", compute_units=16, shared_per_cu=48 * 1024,
                            shared_per_workgroup=48 * 1024, max_threads_per_workgroup=256)


def small() -> Target:
    return Target(name="cuda:small", about="a small Ampere (test)",
                  flags=("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
                  driver="cuda", desc=gpu_program_desc(SMALL), codegen=GpuCodegen(SMALL))


TARGETS = {"cuda:small": small}
"""


def test_a_gpu_target_is_its_module_alone(tmp_path, monkeypatch):
    """A module in the targets package that defines TARGETS is a target: named, described,
    searched within its own limits and compiled, with no other file edited."""
    import sys

    import sft.targets
    from sft.models import SUITE
    from sft.program import prepare
    from sft.search.compile import compile_program
    from sft.search.strategy import search_plan

    (tmp_path / "small_gpu.py").write_text(FAKE_GPU)
    monkeypatch.setattr(sft.targets, "__path__", [*sft.targets.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "sft.targets.small_gpu", raising=False)
    names = target_names()
    assert "cuda:small" in names and [n for n in names if n != "cuda:small"] == NAMES
    small = get_target("cuda:small")
    assert "a small Ampere" in describe_targets()
    case = SUITE["mlp"]
    program, module = prepare(case.build(), case.inputs())
    plan, report = search_plan(program.sft_text, small)
    assert plan.tiles and report.choices
    for choice in report.choices:  # every candidate within this device's limits, not SM80's
        threads = [choice.space.config(i).workgroup_size for i in range(1, len(choice.space))]
        assert threads and max(x * y * z for x, y, z in threads) <= 256
    artifact = compile_program(program, module, small, plan=plan)[4]
    assert artifact.target.name == "cuda:small" and artifact.dispatch_count > 0
    monkeypatch.delitem(sys.modules, "sft.targets.small_gpu")


@pytest.mark.parametrize("text", [
    "func.func @main() {\n  return\n}\n",
    "module {\n  func.func @main() {\n    return\n  }\n}\n",
    "module @m {\n  func.func @main() {\n    return\n  }\n}\n",
    "#map = affine_map<(d0) -> (d0)>\nmodule attributes {torch.debug_module_name = \"M\"} {\n"
    "  func.func @main() {\n    return\n  }\n}\n",
])
def test_device_attribute_goes_on_the_module(text):
    sm90 = get_target("cuda:sm_90")
    placed = sm90.module_text(text)
    assert placed.count("hal.device.targets") == 1 and 'arch = "sm_90"' in placed
    assert compile_module(text, sm90, use_cache=False).dispatch_count == 0  # IREE reads it
    assert get_target("host").module_text(text) == text


@pytest.mark.parametrize("name", NAMES)
def test_every_target_compiles_a_matmul(name):
    artifact = compile_module(kernel_program(MATMUL, None), get_target(name))
    assert artifact.dispatch_count == 1 and artifact.target.name == name
    if name == "cuda:sm_90":  # Hopper code, not IREE's default sm_60 or the sm_80 of the flag
        assert b".target sm_90" in artifact.vmfb


def test_host_reads_the_machine(tmp_path):
    desc = get_target("host").desc
    assert desc.cores >= 1 and desc.simd_f32 in (4, 8, 16)
    caches = read_caches()
    assert desc.l1_bytes == caches.l1_bytes and desc.l2_bytes == caches.l2_bytes
    # A fake sysfs: 48 KiB L1d per core, a 2 MiB L2 shared by two cores, 32 MiB L3.
    for i, (level, kind, size, shared) in enumerate([(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"),
                                                     (2, "Unified", "2048K", "0-1"),
                                                     (3, "Unified", "32M", "0-7")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for field, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared),
                             ("ways_of_associativity", 12 if kind == "Data" else 16)):
            (d / field).write_text(f"{value}\n")
    assert read_caches(tmp_path) == type(caches)(48 << 10, 1 << 20, 32 << 20, l1_ways=12)
    assert read_caches(tmp_path / "missing") == DEFAULT_CACHES


def test_cpu_space_and_model_follow_the_isa():
    wide, narrow = CpuCodegen(AVX512), CpuCodegen(AVX2)
    a, b = wide.space(MATMUL).candidates, narrow.space(MATMUL).candidates
    # AVX2 refuses vector ops past 16 KiB and has 16 registers: its space is a strict subset.
    assert len(b) < len(a)
    assert (b[1:, 2] * b[1:, 3] * b[1:, 4] * 4 < AVX2.max_vector_op_bytes).all()
    assert (a[1:, 2] * a[1:, 3] * a[1:, 4] * 4 >= AVX2.max_vector_op_bytes).any()
    desc = get_target("host").desc
    avx512 = dataclasses.replace(desc, simd_f32=16, vector_registers=32)
    avx2 = dataclasses.replace(desc, simd_f32=8, vector_registers=16)
    block = np.array([[64, 64, 8, 32, 1]])  # 8 x 2 vectors on AVX-512, 8 x 4 on AVX2: spills
    fast = wide.predict(MATMUL, block, avx512, 1, (0,) * 5)[0]
    slow = narrow.predict(MATMUL, block, avx2, 1, (0,) * 5)[0]
    assert slow > 2 * fast


def test_a_gpu_module_compiles_and_saves_where_there_is_no_gpu(tmp_path):
    """sft.compile for a GPU this machine lacks returns the compiled module; using it is one
    clear error naming the driver, and `save` writes the .vmfb to run where the GPU is."""
    model, x = torch.nn.Linear(4, 4), torch.ones(2, 4)
    compiled = sft.compile(model, (x,), target="cuda:sm_90")
    compiled.save(tmp_path / "linear.vmfb")
    assert (tmp_path / "linear.vmfb").read_bytes() == compiled.artifact.vmfb
    assert set(compiled.state_dict()) == {"weight", "bias"}
    try:
        out = compiled(x)
    except SftError as err:
        assert "'cuda' driver" in str(err)
        return
    torch.testing.assert_close(out, model(x).detach())  # a machine with an NVIDIA GPU runs it


def test_verify_on_a_gpu_this_machine_lacks_is_one_clear_error():
    """verify times candidates here: on a machine without the GPU it refuses before searching
    (and records nothing in the tuning database)."""
    from sft.backend.runtime import check_driver

    try:
        check_driver("cuda")
    except SftError:
        with pytest.raises(SftError, match="'cuda' driver"):
            sft.compile(torch.nn.Linear(4, 4), (torch.ones(2, 4),), target="cuda:sm_80",
                        search="verify")
    # else: a machine with a CUDA device has nothing to refuse (verify times candidates on it)


def test_target_key_changes_with_what_changes_the_search():
    sm90 = get_target("cuda:sm_90")
    assert sm90.key(10) != sm90.key(11)
    assert sm90.key(10) != get_target("cuda:sm_80").key(10)
    faster = dataclasses.replace(sm90.codegen.gpu, dram_bandwidth=sm90.codegen.gpu.dram_bandwidth * 2)
    assert dataclasses.replace(sm90, codegen=type(sm90.codegen)(faster)).key(10) != sm90.key(10)
    assert dataclasses.replace(sm90, device_attr="").key(10) != sm90.key(10)
