"""The slow rank: which ranks of a group took longer than their peers (a straggler holds every
other rank up at the next collective).

The rule, for times given as {rank: seconds} (None: the rank has no time, it failed or did not
report): rank r is a straggler when
  - it has a time, and at least one other rank has one;
  - its time exceeds `threshold` x the median of the OTHER ranks' times (its peers: a slow rank
    never raises the median it is compared with, so two ranks are enough, and in four ranks two
    equally slow ones are both found);
  - and, where an expected time is given (the cost model's prediction), its time also exceeds
    `threshold` x that expectation: a rank slower than its peers but within what the model
    predicts is not slow, its peers are faster than the model believes.
Ranks without a time are neither stragglers nor peers: the caller reports them as failed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SftError


@dataclass(frozen=True)
class RankTime:
    """One rank's time against its peers' and the expected time, and the verdict."""

    rank: int
    seconds: float | None
    peers: float | None        # median of the other ranks' seconds; None: no other rank has one
    expected: float | None     # the prediction compared with, where one was given
    straggler: bool

    @property
    def vs_peers(self) -> float | None:
        """Seconds over the peers' median (above 1: slower than its peers)."""
        if self.seconds is None or not self.peers:
            return None
        return self.seconds / self.peers


def compare_ranks(seconds: Mapping[int, float | None], threshold: float = 1.5,
                  expected: float | Mapping[int, float] | None = None) -> list[RankTime]:
    """Every rank's time against its peers' median (in rank order), stragglers flagged by the
    module's rule. `expected` is one prediction for every rank, or one per rank (ranks on
    machines described differently); ranks missing from a mapping are compared with their
    peers only."""
    if not threshold >= 1.0:  # NaN included: a factor below 1 would flag ranks faster than peers
        raise SftError(f"straggler threshold {threshold:g}: must be at least 1 (a factor over "
                       "the peers' time)")
    timed = {r: s for r, s in seconds.items() if s is not None}
    found = []
    for rank in sorted(seconds):
        mine = seconds[rank]
        others = [s for r, s in timed.items() if r != rank]
        peers = statistics.median(others) if others else None
        want = expected.get(rank) if isinstance(expected, Mapping) else expected
        slow = (mine is not None and peers is not None and mine > threshold * peers
                and (want is None or mine > threshold * want))
        found.append(RankTime(rank, mine, peers, want, slow))
    return found


def find_stragglers(seconds: Mapping[int, float | None], threshold: float = 1.5,
                    expected: float | Mapping[int, float] | None = None) -> list[int]:
    """The ranks (ascending) whose time exceeds `threshold` x their peers' median, and the
    expected time where one is given (the module's rule); [] where none does."""
    return [r.rank for r in compare_ranks(seconds, threshold, expected) if r.straggler]
