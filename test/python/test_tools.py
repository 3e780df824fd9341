"""The command-line tools behave like their MLIR counterparts."""

import json
import subprocess
import sys

from sft.space.options import option_space
from sft.tools import opt

LINALG = """func.func @main(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%a : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  return %t : tensor<8x4xf32>
}
"""


def test_help_lists_passes(capsys):
    try:
        opt.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for name in ("sft-raise", "sft-lower", "sft-verify"):
        assert name in out


def test_pipeline_mixes_sft_and_upstream_passes(tmp_path, capsys):
    path = tmp_path / "t.mlir"
    path.write_text(LINALG)
    assert opt.main([str(path), "-p", "sft-raise,canonicalize,sft-verify"]) == 0
    raised = capsys.readouterr().out
    assert '"sft.view"' in raised and "linalg." not in raised
    path.write_text(raised)
    assert opt.main([str(path), "--sft-lower"]) == 0
    assert "linalg.transpose" in capsys.readouterr().out


def test_sft_compile_python_model(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(16, 8)\n"
                      "example_inputs = (torch.randn(4, 16),)\n")
    out = tmp_path / "model.vmfb"
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(script), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0 and "1 dispatches" in proc.stderr


def test_sft_compile_reports_errors_without_traceback(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() {\n  %0 = nope\n}")
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "bad.mlir:2:8: error" in proc.stderr and "Traceback" not in proc.stderr


def test_sft_compile_searches_and_writes_a_report_and_plan(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(64, 128)\n"
                      "example_inputs = (torch.randn(8, 64),)\n")
    report, plan = tmp_path / "report.json", tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(script), "--search", "model",
                           "--report", str(report), "--emit", "plan", "-o", str(plan)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["scored"] > 100 and data["kernels"][0]["domain"] == [8, 128, 64]
    assert len(data["options"]) == len(option_space("host")) and "space 10^" in proc.stderr
    from sft.plan import Plan
    assert Plan.from_json(plan.read_text()).driver in ("", "local-sync")
