# lit configuration for sft's FileCheck tests (lit and filecheck come from PyPI).
import os
import sys

import lit.formats

config.name = "sft"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
root = os.path.dirname(config.test_source_root)
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
config.environment["SFT_CACHE_DIR"] = os.environ.get("SFT_CACHE_DIR", "/tmp/sft-lit-cache")
config.substitutions.append(("%irdl", os.path.join(root, "dialects", "sft.irdl.mlir")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
