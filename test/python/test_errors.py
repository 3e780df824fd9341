"""Bad input gives one clear SftError naming what and where; nothing crashes."""

import numpy as np
import pytest
import torch

import sft
from sft import backend
from sft.errors import SftError
from sft.models import SUITE
from sft.targets import get_target

BAD_MLIR = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = linalg.bogus %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def test_malformed_mlir_names_line_and_column():
    with pytest.raises(SftError, match=r"<input>:2:8: error: custom op 'linalg.bogus' is unknown"):
        sft.compile(BAD_MLIR)


def test_mlir_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text(BAD_MLIR)
    with pytest.raises(SftError, match=r"bad\.mlir:2:8"):
        sft.compile(str(path))


def test_missing_file():
    with pytest.raises(SftError, match="cannot read"):
        sft.compile("/nonexistent/model.mlir")


def test_wrong_shapes_and_dtypes_are_rejected():
    case = SUITE["linear"]
    compiled = sft.compile(case.build(), case.inputs())
    with pytest.raises(SftError, match=r"input 0: expected float32\[8, 64\], got float32\[4, 64\]"):
        compiled(torch.randn(4, 64))
    with pytest.raises(SftError, match="input 0: expected float32"):
        compiled(np.zeros((8, 64), dtype=np.float64))
    with pytest.raises(SftError, match="expected 1 inputs, got 2"):
        compiled(torch.randn(8, 64), torch.randn(8, 64))


def test_unsupported_torch_op_names_the_op():
    class Unsupported(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    with pytest.raises(SftError, match="could not import|unsupported op"):
        sft.compile(Unsupported(), (torch.randn(8),))


def test_mlir_input_with_unraisable_op_is_carried_opaque():
    text = """func.func @main(%a: tensor<2xf32>) -> tensor<4xf32> {
  %c = tensor.concat dim(0) %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}"""
    compiled = sft.compile(text)
    assert compiled.opaque_ops == 1
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(compiled(x), np.concatenate([x, x]))


def test_corrupt_cache_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("SFT_CACHE_DIR", str(tmp_path))
    case = SUITE["relu"]
    first = sft.compile(case.build(), case.inputs())
    for vmfb in tmp_path.glob("*.vmfb"):
        vmfb.write_bytes(b"garbage")
    again = sft.compile(case.build(), case.inputs())
    x = case.inputs()[0]
    np.testing.assert_array_equal(again(x).numpy(), first(x).numpy())


def test_compile_failure_is_an_error_not_a_crash():
    with pytest.raises(SftError, match="iree-compile (failed|crashed)"):
        backend.compile_module("func.func @main() { %0 = \"x.y\"() : () -> i32 return }",
                               get_target("host"), use_cache=False)


# -- the command-line tools: one line `[file:line:col: ]error: ...` on stderr, exit code 1 -------

import subprocess  # noqa: E402
import sys  # noqa: E402

from sft.plan import Plan  # noqa: E402
from sft.tools import compile as sft_compile_tool  # noqa: E402
from sft.tools import opt as sft_opt_tool  # noqa: E402

GOOD_MLIR = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"


def _one_error_line(capsys, code):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def inputs(tmp_path):
    files = {"good.mlir": GOOD_MLIR.encode(), "binary.mlir": b"\x89PNG\r\n\x1a\n\xff\xfe\x00",
             "late.mlir": b"func.func @main() {\n  return \xff\n}\n",
             "unknown.mlir": BAD_MLIR.encode(), "truncated.mlir": GOOD_MLIR[:70].encode(),
             "syntax.json": b'{"expand": [0', "types.json": b'{"expand": "0"}',
             "key.json": b'{"expand": [], "fuse": true}', "tiles.json": b'{"tiles": [[0, {"distribution": [1]}]]}',
             "binary.json": b"\xff\xfe{}"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


@pytest.mark.parametrize("tool", ["compile", "opt"])
@pytest.mark.parametrize("name, expected", [
    ("binary.mlir", r"binary\.mlir:1:1: error: not UTF-8 text \(byte 0x89\)"),
    ("late.mlir", r"late\.mlir:2:10: error: not UTF-8 text \(byte 0xff\)"),
    ("unknown.mlir", r"unknown\.mlir:2:8: error: custom op 'linalg.bogus' is unknown"),
    ("truncated.mlir", r"truncated\.mlir:2:\d+: error: "),
    ("missing.mlir", r"error: cannot read .*missing\.mlir: No such file or directory"),
])
def test_tools_report_bad_input_in_one_line(inputs, capsys, tool, name, expected):
    main = sft_compile_tool.main if tool == "compile" else sft_opt_tool.main
    line = _one_error_line(capsys, main([str(inputs / name), "-o", str(inputs / "out")]))
    assert line.startswith(f"sft-{tool}: ") and __import__("re").search(expected, line), line


@pytest.mark.parametrize("plan, expected", [
    ("syntax.json", r"syntax\.json:1:14: error: plan is not valid JSON"),
    ("types.json", r"types\.json: error: invalid plan: expand must be a list of integers"),
    ("key.json", r"key\.json: error: invalid plan: unknown key 'fuse' \(known: as_imported, batch_split, driver, expand"),
    ("tiles.json", r"tiles\.json: error: invalid plan: 'tiles\[0\]' has no 'vector_common_parallel'"),
    ("binary.json", r"binary\.json:1:1: error: not UTF-8 text"),
    ("missing.json", r"error: cannot read .*missing\.json"),
])
def test_sft_compile_rejects_a_bad_plan_naming_the_key(inputs, capsys, plan, expected):
    code = sft_compile_tool.main([str(inputs / "good.mlir"), "--plan", str(inputs / plan)])
    assert __import__("re").search(expected, _one_error_line(capsys, code))


def test_plan_from_json_names_the_bad_key():
    with pytest.raises(SftError, match=r"unknown key 'tiles\[0\]\.tile' \(known: distribution"):
        Plan.from_json('{"tiles": [[0, {"distribution": [1], "vector_common_parallel": [1], '
                       '"vector_reduction": [0], "tile": 3}]]}')
    with pytest.raises(SftError, match="driver must be a string"):
        Plan.from_json('{"driver": 1}')
    with pytest.raises(SftError, match=r"orders\[0\]: not an order tree"):
        Plan.from_json('{"orders": [[1, [0, 1, 2]]]}')
    with pytest.raises(SftError, match="a plan is a JSON object"):
        Plan.from_json("[]")


@pytest.mark.parametrize("output", ["/nonexistent-folder/out.vmfb", "{tmp}"])
def test_sft_compile_unwritable_output_fails_before_compiling(inputs, capsys, output):
    output = output.format(tmp=inputs)
    line = _one_error_line(capsys, sft_compile_tool.main([str(inputs / "good.mlir"), "-o", output]))
    assert line.startswith(f"sft-compile: error: cannot write {output}: ")


def test_sft_opt_unwritable_output(inputs, capsys):
    line = _one_error_line(capsys, sft_opt_tool.main([str(inputs / "good.mlir"), "-o", str(inputs)]))
    assert line == f"sft-opt: error: cannot write {inputs}: Is a directory"


def test_sft_compile_unknown_target_lists_the_known_ones(inputs):
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(inputs / "good.mlir"),
                           "--target", "tpu"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "sft-compile: error: unknown target 'tpu' (known: host, cuda:sm_80, cuda:sm_90, rocm:gfx942, vulkan:rdna3, vulkan:lavapipe)"


def test_a_binary_input_through_the_real_command_line(inputs):
    for tool in ("compile", "opt"):
        proc = subprocess.run([sys.executable, "-m", f"sft.tools.{tool}", str(inputs / "binary.mlir")],
                              capture_output=True, text=True)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().endswith("binary.mlir:1:1: error: not UTF-8 text (byte 0x89); "
                                            "expected MLIR or Python source")


def test_an_input_that_requires_grad_is_refused_not_cut_from_autograd():
    """sft.compile's outputs carry no gradient: an input that requires grad (under grad mode)
    is one error line naming it, where the loss would otherwise skip this part of the graph;
    under torch.no_grad() or detached, the same call runs and matches eager."""
    model, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    compiled = sft.compile(model, (x,))
    wants = x.clone().requires_grad_()
    with pytest.raises(SftError, match="input 0 requires grad.*torch.no_grad.*backend='sft'"):
        compiled(wants)
    with torch.no_grad():
        torch.testing.assert_close(compiled(wants), model(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled(wants.detach()), model(x).detach(), rtol=1e-5, atol=1e-6)
    fn = sft.compile(lambda a: a * 2, (x,))  # a plain torch function too
    with pytest.raises(SftError, match="requires grad"):
        fn(wants)
