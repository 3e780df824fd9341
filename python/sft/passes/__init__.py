"""sft's passes. Each is a frozen dataclass whose fields are its options; `PASSES` names them."""

from .expand_batch import ExpandBatchPass
from .f64_math import ExpandF64MathPass
from .hold_packed import HoldPackedPass
from .hold_transposed import HoldTransposedPass
from .im2col import Im2colPass
from .split_batch import SplitBatchPass
from .split_reduction import SplitReductionPass
from .lone_sums import SumLoneLoopsPass
from .low_precision import LowPrecisionPass
from .lower import LowerPass
from .orient import OrientPass
from .raise_linalg import RaisePass
from .reassociate import ReassociatePass
from .verify import VerifyPass

PASSES = {p.name: p for p in (RaisePass, LowerPass, VerifyPass, ReassociatePass, ExpandBatchPass,
                                  LowPrecisionPass, ExpandF64MathPass, OrientPass, Im2colPass,
                                  SplitReductionPass, SplitBatchPass, SumLoneLoopsPass,
                                  HoldTransposedPass, HoldPackedPass)}

__all__ = ["PASSES", "ExpandBatchPass", "ExpandF64MathPass", "HoldPackedPass", "HoldTransposedPass", "Im2colPass", "LowPrecisionPass", "LowerPass", "OrientPass", "RaisePass", "ReassociatePass", "SplitBatchPass", "SplitReductionPass", "SumLoneLoopsPass", "VerifyPass"]
