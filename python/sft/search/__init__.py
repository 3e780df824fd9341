"""Search strategies over the plan space. Never imports IREE: it sees spaces and a cost model."""

from .exhaustive import KernelChoice, SearchReport, search_kernels  # noqa: F401
