"""Minimum quorum and the adaptive grace window, as pure functions of time.

A fragment's merge round opens on the syncer's schedule (:mod:`trainer.core.rounds`).
Once K contributions are in (the minimum quorum) the syncer may wait a little
longer for more, but only within the slack the overlap leaves free, so waiting
never blocks a learner:

    slack = τ·t_step − (t_quorum + t_sync),   t_sync = t_upload + t_merge + t_broadcast
    grace = clamp(γ·slack, 0, cap·t_step)

With ``overlap_steps: auto`` τ is not fixed: it covers the measured round trip
(:func:`effective_overlap`), so a slow link does not shut the window. That also
makes the slack 1–2 steps whatever is measured, so the window is 0.5–1 step.

Whom a round waits for is the part that adapts. It merges at once when every
learner it waits for is in: with ``grace_waits_for: active`` every active learner
(heard within the liveness timeout), with ``heard`` only those heard within the
last ``heard_within_s`` (three report intervals; :func:`waited_for`). A learner that
went silent (killed, paused, cut off) is then not waited for a whole liveness
timeout, while a slow one that still reports is waited for as before. The
window's length is not cut to what stragglers were seen to need: a round missed
costs a learner H steps of that fragment, a step of waiting at most one.

t_step, t_quorum (from the round's opening to its K-th contribution) and the
three parts of t_sync are moving averages (:class:`Timing`), each fed with its
own kind of sample. γ is not published by the paper; this project defaults to
0.5. The cap is in steps ("in practice the grace is at most about one step":
default 1), so it means the same on a 50 ms step and a 2.5 s one; with γ·τ ≤ 1
it never binds. A round whose every active learner has contributed merges at
once: there is no one left to wait for.

Example:
    >>> from trainer.core.ema import Ema
    >>> p = QuorumPolicy(min_quorum=1, grace=True, grace_gamma=0.5, grace_cap_steps=1.0, overlap_steps=2)
    >>> t = Timing(t_step=Ema(value=0.1), t_quorum=Ema(value=0.0), t_upload=Ema(value=0.03),
    ...            t_merge=Ema(value=0.01), t_broadcast=Ema(value=0.01))
    >>> round(grace_seconds(p, t), 3)
    0.075
    >>> merge_time(p, t, quorum_at=10.0, contributions=1, active_learners=3)
    10.075
    >>> merge_time(p, t, quorum_at=None, contributions=0, active_learners=3) is None
    True
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from trainer.core.ema import Ema


@dataclass(frozen=True)
class QuorumPolicy:
    """How long a round waits: minimum quorum K and the grace window parameters."""

    min_quorum: int
    grace: bool
    grace_gamma: float = 0.5
    grace_cap_steps: float = 1.0  # the grace window's cap, in steps of the cluster (t_step)
    overlap_steps: int = 2  # τ; with overlap_auto, its floor
    overlap_auto: bool = False  # τ follows the measured round trip (effective_overlap)

    def __post_init__(self) -> None:
        if self.min_quorum < 1:
            raise ValueError(f"min_quorum must be >= 1, got {self.min_quorum}")
        if not 0.0 <= self.grace_gamma < 1.0:
            raise ValueError(f"grace_gamma must be in [0, 1), got {self.grace_gamma}")
        if self.grace_cap_steps < 0:
            raise ValueError(f"grace_cap_steps must be >= 0, got {self.grace_cap_steps}")


@dataclass(frozen=True)
class Timing:
    """Moving averages the grace window is computed from (seconds)."""

    t_step: Ema = field(default_factory=Ema)
    t_quorum: Ema = field(default_factory=Ema)
    t_upload: Ema = field(default_factory=Ema)
    t_merge: Ema = field(default_factory=Ema)
    t_broadcast: Ema = field(default_factory=Ema)

    @classmethod
    def with_alpha(cls, alpha: float) -> Timing:
        return cls(*(Ema(alpha) for _ in range(5)))

    @property
    def t_sync(self) -> float:
        """Upload + merge + broadcast: how long a round's result takes to reach the learners after quorum."""
        return self.t_upload.get() + self.t_merge.get() + self.t_broadcast.get()

    def observe_step(self, seconds: float) -> Timing:
        return replace(self, t_step=self.t_step.update(seconds))

    def observe_quorum(self, seconds: float) -> Timing:
        return replace(self, t_quorum=self.t_quorum.update(seconds))

    def observe_upload(self, seconds: float) -> Timing:
        return replace(self, t_upload=self.t_upload.update(seconds))

    def observe_merge(self, seconds: float) -> Timing:
        return replace(self, t_merge=self.t_merge.update(seconds))

    def observe_broadcast(self, seconds: float) -> Timing:
        return replace(self, t_broadcast=self.t_broadcast.update(seconds))


def effective_overlap(policy: QuorumPolicy, timing: Timing) -> int:
    """τ, the steps a round's result may take to come back: the configured one, or with ``overlap_auto`` the
    fewest whole steps that cover a round's measured time to quorum and round trip, plus one (the slack the
    grace window is cut from), never below the configured floor:

        τ_auto = max(τ_floor, ⌈(t_quorum + t_sync) / t_step⌉ + 1)

    A link too slow for the configured τ makes the round longer than τ·t_step; learners apply the result when
    it arrives anyway, but the slack the configured τ implies is negative, so the window shut: every round
    merged at its first upload and the others, milliseconds behind over equally slow links, were late.

    >>> t = Timing(t_step=Ema(value=0.05), t_quorum=Ema(value=0.6), t_upload=Ema(value=0.6),
    ...            t_merge=Ema(value=0.01), t_broadcast=Ema(value=0.5))
    >>> effective_overlap(QuorumPolicy(1, True, overlap_steps=2), t)
    2
    >>> effective_overlap(QuorumPolicy(1, True, overlap_steps=2, overlap_auto=True), t)  # ⌈1.71 / 0.05⌉ + 1
    36
    """
    step = timing.t_step.get()
    if not policy.overlap_auto or step <= 0:
        return policy.overlap_steps
    return max(policy.overlap_steps, math.ceil((timing.t_quorum.get() + timing.t_sync) / step - 1e-9) + 1)


def grace_seconds(policy: QuorumPolicy, timing: Timing) -> float:
    """The grace window after quorum; 0 when disabled or when there is no slack."""
    if not policy.grace:
        return 0.0
    slack = effective_overlap(policy, timing) * timing.t_step.get() - (timing.t_quorum.get() + timing.t_sync)
    return min(max(policy.grace_gamma * slack, 0.0), policy.grace_cap_steps * timing.t_step.get())


def waited_for(
    active: Iterable[tuple[str, float]], contributed: Collection[str], now: float, heard_within_s: float | None
) -> int:
    """How many learners a round waits for: of the active ``(learner, last heard)``, those in (``contributed``) and
    the others heard within ``heard_within_s`` of ``now`` (None: every active learner, ``grace_waits_for:
    active``). :func:`merge_time` takes it as its ``active_learners``.

    >>> active = [("a", 9.9), ("b", 9.8), ("c", 7.0)]          # c last heard 3 s ago: down, paused or cut off
    >>> waited_for(active, {"a"}, now=10.0, heard_within_s=1.0), waited_for(active, {"a"}, now=10.0, heard_within_s=None)
    (2, 3)
    >>> waited_for(active, {"c"}, now=10.0, heard_within_s=1.0)   # what is in counts, however long ago
    3
    """
    return sum(
        1 for lid, heard in active if heard_within_s is None or lid in contributed or now - heard <= heard_within_s
    )


def merge_time(
    policy: QuorumPolicy,
    timing: Timing,
    quorum_at: float | None,
    contributions: int,
    active_learners: int,
    opened_at: float | None = None,
) -> float | None:
    """When a round should merge, or None while it lacks quorum.

    ``quorum_at`` is when the K-th contribution arrived (None before); a round
    never merges before it opens (``opened_at``), however early its uploads came.

    >>> p = QuorumPolicy(min_quorum=1, grace=False)
    >>> merge_time(p, Timing(), quorum_at=4.0, contributions=1, active_learners=2, opened_at=5.0)
    5.0
    """
    if quorum_at is None or contributions < policy.min_quorum:
        return None
    grace_s = 0.0 if contributions >= active_learners else grace_seconds(policy, timing)  # all in: no window
    return merge_time_with_grace(grace_s, quorum_at, contributions, active_learners, opened_at)


def merge_time_with_grace(
    grace_s: float, quorum_at: float, contributions: int, active_learners: int, opened_at: float | None = None
) -> float:
    """:func:`merge_time` of a round that has its quorum, with its grace window ``grace_s`` already computed
    (:func:`grace_seconds`: it changes only when the timing does, so a caller merging many rounds keeps it).

    >>> merge_time_with_grace(0.5, quorum_at=4.0, contributions=1, active_learners=2, opened_at=5.0)
    5.5
    >>> merge_time_with_grace(0.5, quorum_at=4.0, contributions=2, active_learners=2)  # all in: at once
    4.0
    """
    start = quorum_at if opened_at is None else max(quorum_at, opened_at)
    return start if contributions >= active_learners else start + grace_s
