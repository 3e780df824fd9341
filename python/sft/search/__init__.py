"""Search strategies over the plan space. Never imports IREE: it sees spaces and a cost model."""

from .exhaustive import KernelChoice, OptionChoice, SearchReport, search_program  # noqa: F401
