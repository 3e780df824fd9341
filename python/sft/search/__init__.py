"""The search: strategy.py (the outer search over program rewrites and option sets, the tuning
database's replay, the fallbacks, the compile), exhaustive.py (per-kernel minima under each
option set, on the cost model alone), chains.py (chain orders), candidates.py (plans from a
search's result). Only strategy.py reaches IREE, through the backend (its profiles)."""

from .exhaustive import KernelChoice, OptionChoice, SearchReport, search_program  # noqa: F401
