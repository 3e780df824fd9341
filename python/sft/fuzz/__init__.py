"""Differential fuzzing: random sft programs compiled under random plans, checked against numpy.

`programs.generate` builds a random well-typed function in the sft dialect together with its
exact numpy value and an error bound; `plans.draw_plan` draws a plan from the search space of
that program; `check.run` compiles, runs and classifies the result (see `check` for the rule).
`sft-fuzz` (tools/fuzz.py) runs the long campaign; test/python/test_fuzz.py the short one.
"""

from .check import FAILURES, Outcome, draw_and_run, run, run_search
from .plans import draw_plan
from .choosers import Chooser, DataChooser, RandomChooser
from .programs import Program, generate

__all__ = ["FAILURES", "Chooser", "DataChooser", "Outcome", "Program", "RandomChooser",
           "draw_and_run", "draw_plan", "generate", "run", "run_search"]
