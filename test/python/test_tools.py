"""The command-line tools behave like their MLIR counterparts."""

import json
import os
import subprocess
import sys

from sft.space.options import cpu_option_space
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
    # A cache of its own: the same structure searched by another test would be replayed.
    env = {**os.environ, "SFT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(script), "--search", "model",
                           "--report", str(report), "--emit", "plan", "-o", str(plan)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["scored"] > 100 and data["kernels"][0]["domain"] == [8, 128, 64]
    # every option set but im2col's (a Linear has no convolution)
    assert len(data["options"]) == len([o for o in cpu_option_space() if not o.im2col])
    assert "space 10^" in proc.stderr
    from sft.plan import Plan
    assert Plan.from_json(plan.read_text()).driver in ("", "local-sync")


def _error_line(capsys, code):
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_bad_upstream_pass_name_is_named_with_the_known_passes(tmp_path, capsys):
    path = tmp_path / "t.mlir"
    path.write_text(LINALG)
    line = _error_line(capsys, opt.main([str(path), "-p", "sft-raise,canonicalise"]))
    assert line.startswith("sft-opt: error: unknown pass 'canonicalise' (sft passes: sft-expand-batch, ")
    assert "sft-raise" in line and "canonicalize" in line
    line = _error_line(capsys, opt.main([str(path), "-p", "func.func(linalg-nope)"]))
    assert "unknown pass 'linalg-nope'" in line
    line = _error_line(capsys, opt.main([str(path), "-p", "canonicalize{bogus=1}"]))
    assert line == "sft-opt: error: bad pass 'canonicalize{bogus=1}': no such option bogus"
    line = _error_line(capsys, opt.main([str(path), "-p", "sft-nope"]))
    assert line.startswith("sft-opt: error: unknown sft pass 'sft-nope' (known: ")


def test_a_bad_pass_name_fails_before_any_pass_runs(tmp_path, capsys):
    path, out = tmp_path / "t.mlir", tmp_path / "out.mlir"
    path.write_text(LINALG)
    assert opt.main([str(path), "-p", "sft-raise,nope", "-o", str(out)]) == 1
    assert not out.exists()


def test_run_tool_turns_stray_io_errors_into_one_line(capsys):
    def unreadable():
        raise FileNotFoundError(2, "No such file or directory", "x.bin")

    def undecodable():
        b"\xff".decode()

    def multiline():
        raise opt.SftError("iree-compile failed:\n  first\n  second")

    assert _error_line(capsys, opt.run_tool("t", unreadable)) == "t: error: x.bin: No such file or directory"
    assert _error_line(capsys, opt.run_tool("t", undecodable)).startswith("t: error: not UTF-8 text")
    assert _error_line(capsys, opt.run_tool("t", multiline)) == \
        "t: error: iree-compile failed:; first; second"


def test_binary_stdin_to_sft_opt():
    proc = subprocess.run([sys.executable, "-m", "sft.tools.opt"], input=b"module {}\n\xff\xfe",
                          capture_output=True)
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr
    assert proc.stderr.decode().strip() == ("sft-opt: <stdin>:2:1: error: not UTF-8 text (byte 0xff); "
                                            "expected MLIR or Python source")


def test_sft_compile_writes_through_an_unusable_cache(tmp_path):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("x")
    src, out = tmp_path / "t.mlir", tmp_path / "t.vmfb"
    src.write_text(LINALG)
    proc = subprocess.run([sys.executable, "-m", "sft.tools.compile", str(src), "-o", str(out)],
                          capture_output=True, text=True,
                          env={**__import__("os").environ, "SFT_CACHE_DIR": str(blocker)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert out.stat().st_size > 0 and proc.stderr.count("cannot create the sft cache folder") == 1
