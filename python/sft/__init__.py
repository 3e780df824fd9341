"""sft: a search-based tensor compiler on MLIR and IREE.

    import sft
    compiled = sft.compile(torch_module, example_inputs)
    out = compiled(*example_inputs)
"""

from .api import CompiledModel, compile  # noqa: F401  (shadows the builtin inside this package only)
from .jit import jit  # noqa: F401
from .errors import IllegalPlan, SftError  # noqa: F401
from .decisions import GpuConfig, TileConfig  # noqa: F401
from .plan import Plan  # noqa: F401
from .train import TrainStep, compile_train_step, load_train_step  # noqa: F401
from .values import DeviceArray  # noqa: F401

__version__ = "0.1.0"
