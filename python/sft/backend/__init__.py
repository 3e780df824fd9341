"""The only code that runs iree-compile, benchmarks or touches devices."""

from .iree import Artifact, Target, compile_module, load, profile, TARGETS  # noqa: F401
