"""The only code that runs iree-compile, benchmarks or touches devices."""

from .iree import Artifact, Target, compile_module, profile, TARGETS  # noqa: F401
from .runtime import load  # noqa: F401
