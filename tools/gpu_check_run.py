#!/usr/bin/env python3
"""gpu_check_run.py DIR: the run phase of tools/gpu-check, on the machine with the GPU.

The entry point of the package gpu_check_run/ beside this script (standalone: numpy, IREE's
runtime and torch, never sft); `python3 tools/gpu_check_run.py --help` for its options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
