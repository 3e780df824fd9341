"""sft's passes. Each is a frozen dataclass whose fields are its options; `PASSES` names them."""

from .expand_batch import ExpandBatchPass
from .low_precision import LowPrecisionPass
from .lower import LowerPass
from .raise_linalg import RaisePass
from .reassociate import ReassociatePass
from .verify import VerifyPass

PASSES = {p.name: p for p in (RaisePass, LowerPass, VerifyPass, ReassociatePass, ExpandBatchPass,
                                  LowPrecisionPass)}

__all__ = ["PASSES", "ExpandBatchPass", "LowPrecisionPass", "LowerPass", "RaisePass", "ReassociatePass", "VerifyPass"]
