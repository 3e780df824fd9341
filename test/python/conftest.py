import os
import tempfile

# Tests never touch the user's cache: one fresh cache directory per test session.
os.environ.setdefault("SFT_CACHE_DIR", tempfile.mkdtemp(prefix="sft-test-cache-"))
