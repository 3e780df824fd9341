"""Where the fuzzer's random choices come from: a numpy RNG for campaigns, hypothesis for the
tests (so that a failing program shrinks). Programs and plans draw through the same interface."""

from __future__ import annotations

import numpy as np


class Chooser:
    """Where every random choice comes from. `int` shrinks towards `lo`, `flag` towards False."""

    def int(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def flag(self, p: float) -> bool:
        """True with probability about p."""
        return self.int(0, 999) >= 1000 - int(1000 * p)

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]


class RandomChooser(Chooser):
    """Choices from a numpy RNG: the campaign's source (no shrinking)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))


class DataChooser(Chooser):
    """Choices drawn from hypothesis's `st.data()`, so that a failing program shrinks."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi)) if hi > lo else lo
