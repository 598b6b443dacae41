"""The steps one learner id can have trained so far, as time allows: what its reported tokens count up to.

A learner's Reports claim cumulative tokens; the syncer counts them toward the budget only as fast as time
allows. The bound is per learner id, over all its incarnations, and accrues with the syncer's clock:

    allowed(t) = slack + ∫ max_speedup / pace(u) du     (u from the id's first join to t)
    counted(t) ≤ tokens_per_step × allowed(t)

``slack`` (a step in flight at each end, and rounding) is granted once, when the allowance starts, not per
Report: granted per Report, a learner reporting often enough minted tokens without bound (docs/security.md,
invariant ``budget``). The integral accrues piecewise at the pace of each moment, so a pace that slows later
takes back nothing already allowed. Before the cluster has a pace nothing accrues; the first pace then covers the
time since the allowance started (the syncer cannot know a pace it was never told; ``pace``'s own invariant).

Example:
    >>> a = Allowance.starting(now=0.0, slack=4)
    >>> a = a.accrued(now=2.0, pace_s=0.1, max_speedup=4.0)     # 4 × 2 s / 0.1 s = 80 steps, + 4 of slack
    >>> a.steps
    84.0
    >>> a, grown = a.counting(claimed=10_000, tokens_per_step=64)  # counted only up to 84 steps' tokens
    >>> grown, a.room(64)
    (5376, 0)
    >>> a.accrued(now=2.0, pace_s=0.1, max_speedup=4.0).room(64)   # a Report again at once: nothing more
    0
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Allowance:
    """``steps`` allowed since the allowance started (accrued up to ``at``) and the tokens ``used`` of them."""

    steps: float
    at: float
    used: int = 0

    @classmethod
    def starting(cls, now: float, slack: int) -> Allowance:
        return cls(steps=float(slack), at=now)

    def accrued(self, now: float, pace_s: float | None, max_speedup: float) -> Allowance:
        """The allowance with ``max_speedup`` steps per ``pace_s`` seconds added since ``at`` (none without a pace:
        the time waits for the first pace)."""
        if pace_s is None or pace_s <= 0 or now <= self.at:
            return self
        return replace(self, steps=self.steps + max_speedup * (now - self.at) / pace_s, at=now)

    def room(self, tokens_per_step: int) -> int:
        """Tokens that may still be counted now."""
        return max(int(self.steps) * tokens_per_step - self.used, 0)

    def counting(self, claimed: int, tokens_per_step: int, bounded: bool = True) -> tuple[Allowance, int]:
        """Count up to ``claimed`` more tokens (all of them when not ``bounded``: no pace yet, or the bound is
        off); returns the allowance after and the tokens counted."""
        grown = max(claimed, 0)
        if bounded:
            grown = min(grown, self.room(tokens_per_step))
        return replace(self, used=self.used + grown), grown
