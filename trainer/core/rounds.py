"""Fragment sync rounds on the syncer's step clock.

The paper takes one outer step per *scheduled* sync of a fragment: round r of
fragment p is a point on a fragment schedule the whole cluster shares, not
"whatever arrives after the last merge". It runs on a clock of cluster steps
that the syncer owns:

    S(t) = anchor_step + (t − anchor_time) / pace

where ``pace`` is the lower median over the M configured learners of their step
times (:func:`cluster_pace`; each the last one heard, kept while its learner is
away): a minority of slow, lying or absent learners cannot set it. Re-pacing re-anchors at
the current S, so S is continuous and never goes back. Round r of fragment p
opens when S reaches ``offset(p) + r·H`` (:class:`FragmentSchedule`'s
staggered offsets). The syncer sends (S, pace) in its replies; a learner
extrapolates S on its own monotonic clock between replies and syncs fragment p
at its last step boundary at or before a round's opening (:func:`sync_step`):
a slow learner covers fewer steps per round, and its token weight says so.

Example:
    >>> from trainer.core.fragment_schedule import FragmentSchedule
    >>> s = FragmentSchedule(num_fragments=2, sync_every=4, overlap_steps=1, staggered=True)
    >>> c = StepClock().repaced(now=10.0, pace_s=0.5)     # the first step time starts the clock at S = 0
    >>> c.step_at(12.0)
    4.0
    >>> [round_at(s, p, c.step_at(12.0)) for p in (0, 1)]  # fragment 0 opens at S = 2, 6, ...; 1 at 4, 8, ...
    [0, 0]
    >>> c.time_of(round_opens(s, 1, 1))                   # round 1 of fragment 1 opens at S = 8
    14.0
    >>> c2 = c.repaced(now=12.0, pace_s=0.25)             # twice the pace from S = 4 on
    >>> c2.step_at(13.0)
    8.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, overload

from trainer.core.fragment_schedule import FragmentSchedule

if TYPE_CHECKING:
    import numpy as np  # round_opens also takes an array of rounds (the scale simulator); core needs no numpy


@dataclass(frozen=True)
class StepClock:
    """Cluster steps as a function of time; idle (S stays at ``anchor_step``) until a pace is known."""

    anchor_time: float | None = None
    anchor_step: float = 0.0
    pace_s: float = 0.0  # seconds per cluster step

    @property
    def started(self) -> bool:
        return self.anchor_time is not None and self.pace_s > 0

    def step_at(self, now: float) -> float:
        if not self.started:
            return self.anchor_step
        assert self.anchor_time is not None
        return self.anchor_step + max(now - self.anchor_time, 0.0) / self.pace_s

    def time_of(self, step: float) -> float | None:
        """When S reaches ``step`` at the current pace (None while idle)."""
        if not self.started:
            return None
        assert self.anchor_time is not None
        return self.anchor_time + (step - self.anchor_step) * self.pace_s

    def repaced(self, now: float, pace_s: float) -> StepClock:
        """The same clock from ``now`` on at a new pace (starts an idle clock)."""
        if not (math.isfinite(pace_s) and pace_s > 0):
            raise ValueError(f"pace must be a finite number of seconds > 0, got {pace_s}")
        return replace(self, anchor_time=now, anchor_step=self.step_at(now), pace_s=float(pace_s))

    @classmethod
    def received(cls, local_now: float, step: float, pace_s: float) -> StepClock:
        """A learner's copy of the syncer's clock from a reply, anchored on the learner's own clock."""
        if pace_s > 0 and math.isfinite(pace_s) and math.isfinite(step):
            return cls(local_now, float(step), float(pace_s))
        return cls(None, float(step) if math.isfinite(step) else 0.0, 0.0)


def sync_step(clock: StepClock, now: float, own_step_s: float) -> float:
    """The cluster step a learner compares with the round schedule at a step boundary.

    ``own_step_s`` is how long the learner's next step may take (its mean
    step time, or a high quantile of its step times:
    :mod:`trainer.core.step_timer`). Just under that far ahead of the clock: a learner
    then syncs at its last step boundary at or before a round's opening (its
    next one would be after it), so every learner's upload is at the syncer
    when the round opens, whatever the learner's speed; the syncer never
    merges a round before it opens, so an early upload waits there. At the
    boundary nearest the opening instead, a slow learner's upload came up to
    half of *its* step late, often past the grace window: with two learners
    of four at half speed, 3.14 learners per merge against 3.83
    (``benchmarks.claims.heterogeneous``, docs/benchmarks.md's side-by-side runs).

    >>> sync_step(StepClock(0.0, 0.0, 0.1), now=1.0, own_step_s=0.1) < 11.0  # S = 10: round opening at 11 waits
    True
    >>> sync_step(StepClock(0.0, 0.0, 0.05), now=1.0, own_step_s=0.1)  # a learner at half the pace: 2 steps ahead
    21.999999999999996
    >>> sync_step(StepClock(), now=1.0, own_step_s=0.1)                 # an idle clock stays put
    0.0
    """
    s = clock.step_at(now)
    if not clock.started or not (math.isfinite(own_step_s) and own_step_s > 0):
        return s
    # Strictly below the next boundary's cluster step: a learner on the clock's own pace syncs at the boundary that
    # falls on an opening, not one step before it.
    return math.nextafter(s + own_step_s / clock.pace_s, -math.inf)


def cluster_pace(step_times: Iterable[float], slots: int = 0) -> float | None:
    """The lower median of positive finite step times, over at least ``slots`` values: the learners not heard
    from yet fill the missing slots as +∞ (None when the median is one of them, or there are no values).

    Over the M configured slots, one learner moves the median by at most one rank: it stays between two other
    learners' values whatever that one says, and a minority that has not reported cannot be outvoted by a
    minority that has (docs/security.md, invariant ``pace``).

    >>> cluster_pace([0.05, 0.05, 0.1, 0.1]), cluster_pace([0.05, 1e-9, 0.05]), cluster_pace([])
    (0.05, 0.05, None)
    >>> cluster_pace([1e-9], slots=4), cluster_pace([1e-9, 0.1], slots=4), cluster_pace([1e-9, 0.1, 0.2], slots=4)
    (None, 0.1, 0.1)
    """
    ts = sorted(t for t in step_times if math.isfinite(t) and t > 0)
    ts += [math.inf] * max(slots - len(ts), 0)
    pace = ts[(len(ts) - 1) // 2] if ts else None
    return pace if pace is not None and math.isfinite(pace) else None


@overload
def round_opens(fragment_schedule: FragmentSchedule, fragment: int, r: int) -> int: ...
@overload
def round_opens(fragment_schedule: FragmentSchedule, fragment: int, r: np.ndarray) -> np.ndarray: ...
def round_opens(fragment_schedule: FragmentSchedule, fragment: int, r: int | np.ndarray) -> int | np.ndarray:
    """The cluster step at which round ``r`` of ``fragment`` opens (elementwise for an array of rounds)."""
    return fragment_schedule.offset(fragment) + r * fragment_schedule.sync_every


def round_at(fragment_schedule: FragmentSchedule, fragment: int, step: float) -> int:
    """The newest round of ``fragment`` open at cluster step ``step`` (−1 before its first)."""
    off = fragment_schedule.offset(fragment)
    if step < off:
        return -1
    return int((step - off) // fragment_schedule.sync_every)
