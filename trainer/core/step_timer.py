"""How far ahead a learner looks for its next step boundary when it decides to sync.

A learner syncs a fragment at its last step boundary at or before the round's
opening (:func:`trainer.core.rounds.sync_step`), so at each boundary it asks
whether its *next* boundary would come after the opening. The two mistakes
cost differently. Syncing one boundary too early gives up about one step of
the fragment's progress (the steps after a sync are overwritten by the merged
value). Waiting one boundary too long, when that step ends after the round has
merged, gets the upload refused and the whole round's progress on the
fragment, about H steps, is overwritten. So sync now when the chance that the
next step outlasts the time left exceeds 1/H: look ahead by the (1 − 1/H)
quantile of the learner's recent boundary-to-boundary periods.

    lookahead = quantile_{1 − 1/H}(last WINDOW periods),  at most CLIP × their median

Why the clip: a stall (a SIGSTOP pause, a GC) measures one period of seconds;
with H large the quantile is the window's maximum, and the learner would look
seconds ahead for the next WINDOW steps.

It is ``learner.sync_lookahead: quantile``; the default is ``mean`` (the
learner's mean step time), because the quantile trades one failure for
another. With heavy-tailed steps on fast links it keeps syncs from starting
after the opening: on 2 CPU cores shared by four learners, the syncer and
Toxiproxy, a step took 0.55–3.5× its median, and `kill-and-rejoin` with H = 8
refused 19% of uploads as late instead of 26% (seeds 1–5 side by side). But
a high quantile estimated from 64 samples differs from learner to learner, so
their syncs spread over more than a step; over slow links, where every upload
arrives after the opening and a round merges at its first arrival plus the
grace window, the spread is what makes uploads late: one run in five of
``benchmarks.claims.slow_links`` merged 2.0 learners per round and needed 1.5× the
tokens (docs/trainer.md, "Choices").

Example:
    >>> t = StepTimes()
    >>> for d in [0.1] * 30 + [0.3] * 2:
    ...     t = t.update(d)
    >>> t.lookahead(sync_every=4), t.lookahead(sync_every=32)   # 3/4 and 31/32 quantiles
    (0.1, 0.3)
    >>> t.update(8.0).lookahead(sync_every=500)                  # a stall counts as at most CLIP medians
    0.4
    >>> t.lookahead(sync_every=1)                                # H = 1: the 0 quantile, the shortest
    0.1
    >>> StepTimes().lookahead(sync_every=32, default=0.05)       # no period measured yet
    0.05
    >>> lookahead_s("mean", t, sync_every=32, mean_s=0.11), lookahead_s("quantile", t, sync_every=32, mean_s=0.11)
    (0.11, 0.3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW = 64  # periods kept: enough for the 31/32 quantile of H = 32 to rest on two of them
CLIP = 4.0  # the lookahead is at most this many median periods


@dataclass(frozen=True)
class StepTimes:
    """A learner's most recent boundary-to-boundary step periods (seconds), oldest first."""

    periods: tuple[float, ...] = ()

    def update(self, period: float) -> StepTimes:
        """Keep one more period; a non-finite or negative one is ignored."""
        if not (math.isfinite(period) and period >= 0):
            return self
        return StepTimes((*self.periods[-(WINDOW - 1) :], float(period)))

    def lookahead(self, sync_every: int, default: float = 0.0) -> float:
        """The (1 − 1/H) quantile of the periods (nearest rank), at most CLIP medians."""
        if not self.periods:
            return default
        s = sorted(self.periods)
        q = 1.0 - 1.0 / max(sync_every, 1)
        rank = min(max(math.ceil(q * len(s)) - 1, 0), len(s) - 1)
        return min(s[rank], CLIP * s[(len(s) - 1) // 2])


def lookahead_s(rule: str, times: StepTimes, sync_every: int, mean_s: float) -> float:
    """The lookahead ``learner.sync_lookahead`` names: ``mean`` → ``mean_s``, ``quantile`` → the quantile."""
    if rule == "quantile":
        return times.lookahead(sync_every, default=mean_s)
    if rule == "mean":
        return mean_s
    raise ValueError(f"learner.sync_lookahead must be 'mean' or 'quantile', got {rule!r}")


def reported_step_time(ema_s: float, period_s: float, weight: float = 0.1) -> float:
    """The step time a learner reports, which paces the cluster's clock: an exponential average of its step
    *periods* (boundary to boundary, time spent waiting for a merge excluded), each counted as at most CLIP
    times the average so far.

    The period, not a step's compute: what a learner does between boundaries (starting syncs, applying merges) is
    part of how fast it steps. Paced by compute alone, the clock ran ahead of the learners: 1.039 rounds per H of
    their steps against 1.016 with the period (``benchmarks.claims.reference_parity``, 256 tokens, 5 seeds side by
    side). The clip keeps one stall (SIGSTOP, a GC) from moving the cluster's pace by more than a few steps' worth.

        ema ← (1 − w)·ema + w·min(period, CLIP·ema)        (ema = 0: the first period)

    Example:
        >>> round(reported_step_time(0.05, 0.06), 4)
        0.051
        >>> round(reported_step_time(0.05, 10.0), 4)     # a 10 s stall counts as 4 steps of 50 ms
        0.065
        >>> reported_step_time(0.0, 0.07)                # nothing measured yet
        0.07
    """
    if ema_s <= 0:
        return period_s
    return (1 - weight) * ema_s + weight * min(period_s, CLIP * ema_s)
