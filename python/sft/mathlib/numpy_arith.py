"""The arithmetic of `functions` on numpy arrays: the same operations, rounded the same way
(IEEE f64, no contraction), so that the accuracy of what the MLIR emitter builds can be
measured on millions of inputs without compiling."""

from __future__ import annotations

import numpy as np


class NumpyArith:
    @staticmethod
    def select(c, a, b):
        return np.where(c, a, b)

    lt, le, eq, ne = np.less, np.less_equal, np.equal, np.not_equal
    and_, or_ = np.logical_and, np.logical_or

    @staticmethod
    def bits(x):
        return np.asarray(x, np.float64).view(np.int64)

    @staticmethod
    def float_of_bits(i):
        return np.asarray(i, np.int64).view(np.float64)

    @staticmethod
    def to_int(x):
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def to_float(i):
        return np.asarray(i).astype(np.float64)

    shl, shr = staticmethod(np.left_shift), staticmethod(np.right_shift)  # >> is arithmetic
    band, bor = staticmethod(np.bitwise_and), staticmethod(np.bitwise_or)


def evaluate(name: str, *args: np.ndarray) -> np.ndarray:
    """`functions.FUNCTIONS[name]` on f64 arrays."""
    from .functions import FUNCTIONS

    with np.errstate(all="ignore"):  # the paths not selected may divide by zero
        return FUNCTIONS[name][0](NumpyArith, *(np.asarray(a, np.float64) for a in args))
