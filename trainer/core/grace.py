"""Minimum quorum and the adaptive grace window, as pure functions of time.

A fragment's merge round opens when its first contribution arrives. Once K
contributions are in (the minimum quorum) the syncer may wait a little longer
for more, but only within the slack the overlap leaves free, so waiting never
blocks a learner:

    slack = τ·t_step − (t_quorum + t_sync)
    grace = clamp(γ·slack, 0, cap)

t_step, t_quorum and t_sync are moving averages (:class:`Timing`). γ is not
published by the paper; this project defaults to 0.5. A round whose every
active learner has contributed merges at once: there is no one left to wait for.

Example:
    >>> from trainer.core.ema import Ema
    >>> p = QuorumPolicy(min_quorum=1, grace_enabled=True, gamma=0.5, cap_s=1.0, overlap_steps=2)
    >>> t = Timing(t_step=Ema(value=0.1), t_quorum=Ema(value=0.0), t_sync=Ema(value=0.05))
    >>> round(grace_seconds(p, t), 3)
    0.075
    >>> merge_time(p, t, quorum_at=10.0, contributions=1, active_learners=3)
    10.075
    >>> merge_time(p, t, quorum_at=None, contributions=0, active_learners=3) is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainer.core.ema import Ema


@dataclass(frozen=True)
class QuorumPolicy:
    """How long a round waits: minimum quorum K and the grace window parameters."""

    min_quorum: int
    grace_enabled: bool
    gamma: float = 0.5
    cap_s: float = 1.0
    overlap_steps: int = 2

    def __post_init__(self) -> None:
        if self.min_quorum < 1:
            raise ValueError(f"min_quorum must be >= 1, got {self.min_quorum}")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"grace gamma must be in [0, 1), got {self.gamma}")
        if self.cap_s < 0:
            raise ValueError(f"grace cap_s must be >= 0, got {self.cap_s}")


@dataclass(frozen=True)
class Timing:
    """Moving averages the grace window is computed from (seconds)."""

    t_step: Ema = field(default_factory=Ema)
    t_quorum: Ema = field(default_factory=Ema)
    t_sync: Ema = field(default_factory=Ema)

    def observe_step(self, seconds: float) -> "Timing":
        return replace(self, t_step=self.t_step.update(seconds))

    def observe_quorum(self, seconds: float) -> "Timing":
        return replace(self, t_quorum=self.t_quorum.update(seconds))

    def observe_sync(self, seconds: float) -> "Timing":
        return replace(self, t_sync=self.t_sync.update(seconds))


def grace_seconds(policy: QuorumPolicy, timing: Timing) -> float:
    """The grace window after quorum; 0 when disabled or when there is no slack."""
    if not policy.grace_enabled:
        return 0.0
    slack = policy.overlap_steps * timing.t_step.get() - (timing.t_quorum.get() + timing.t_sync.get())
    return min(max(policy.gamma * slack, 0.0), policy.cap_s)


def merge_time(
    policy: QuorumPolicy,
    timing: Timing,
    quorum_at: float | None,
    contributions: int,
    active_learners: int,
) -> float | None:
    """When a round should merge, or None while it lacks quorum.

    ``quorum_at`` is when the K-th contribution arrived (None before).
    """
    if quorum_at is None or contributions < policy.min_quorum:
        return None
    if contributions >= active_learners:
        return quorum_at
    return quorum_at + grace_seconds(policy, timing)
