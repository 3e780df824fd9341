"""Bad input gives one clear SftError naming what and where; nothing crashes."""

import numpy as np
import pytest
import torch

import sft
from sft import backend
from sft.errors import SftError
from sft.models import SUITE

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
    with pytest.raises(SftError, match="iree-compile failed"):
        backend.compile_module("func.func @main() { %0 = \"x.y\"() : () -> i32 return }",
                               use_cache=False)
