"""The only code that runs iree-compile, benchmarks or touches devices."""

from .iree import Artifact, compile_module, profile, profiles  # noqa: F401
from .runtime import load  # noqa: F401
