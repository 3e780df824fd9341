import os
import tempfile

# Tests never touch the user's cache: one fresh cache directory per test session.
os.environ.setdefault("SFT_CACHE_DIR", tempfile.mkdtemp(prefix="sft-test-cache-"))


import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def top_level_script(tmp_path):
    """Runs `body` as a user's script with no `__main__` guard, in a fresh cache, and returns
    its stdout; fails where it exits non-zero or where anything imported it a second time (a
    worker or helper process that ran the user's script again)."""
    def run(body: str) -> str:
        marker, script = tmp_path / "runs", tmp_path / "user_script.py"
        script.write_text(f"with open({str(marker)!r}, 'a') as f:  # once per import\n"
                          "    f.write('x')\n" + textwrap.dedent(body))
        env = dict(os.environ, SFT_CACHE_DIR=str(tmp_path / "cache"))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=600, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert marker.read_text() == "x"
        return proc.stdout
    return run
