"""How late a learner's uploads are counted, in cluster steps, and so how much earlier it syncs.

A round takes the uploads whose header reached the syncer by its merge time
(:mod:`trainer.core.inflight`). A learner syncs at its last step boundary at
or before the opening *by its own reading* of the syncer's clock, so its
header is counted

    lag = header_step − sent_step

steps after the learner meant it to be: ``sent_step`` is the learner's reading
when the upload left, ``header_step`` the syncer's clock when the header
arrived (every UploadReply carries it). The lag adds the reading's error (the
reading is extrapolated from the last reply, anchored when it was received)
and the header's delivery (the learner and syncer processes, the link's
latency); not the time the upload waited behind the learner's previous one, which
syncing earlier would not shorten. On 2 busy cores a header took 15–65 ms
(p50–p90) against a 50 ms step, and about one upload in ten reached its round
after the merge.

So the learner looks ahead by its lag as well as its next step: with
``learner.sync_lookahead: mean`` by the mean lag, with ``quantile`` by the
(1 − 1/H) quantile (the rule of :mod:`trainer.core.step_timer`: one boundary
early costs a step of the fragment's progress, a missed round H steps). Each
lag counts as at most CLIP medians or one step, whichever is more (a learner
paused with an upload in flight measures one lag of many steps: it must not
make the learner sync far ahead for the next WINDOW uploads); never below 0.

Example:
    >>> lags = HeaderLags()
    >>> for x in [0.2] * 30 + [1.5, 2.5]:
    ...     lags = lags.update(x)
    >>> round(lags.margin("mean", sync_every=32), 3), lags.margin("quantile", sync_every=32)  # 1.5, 2.5 count as 1
    (0.25, 1.0)
    >>> HeaderLags().margin("quantile", sync_every=32), HeaderLags().update(-0.3).margin("mean", sync_every=32)
    (0.0, 0.0)
    >>> round(lags.update(200.0).margin("mean", sync_every=32), 3)   # a 10 s pause at 50 ms steps counts as 1.0
    0.273
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

WINDOW = 64  # lags kept, as step_timer's periods
CLIP = 4.0  # the quantile margin is at most this many median lags, or one step if that is more


@dataclass(frozen=True)
class HeaderLags:
    """A learner's most recent header lags (cluster steps), oldest first."""

    lags: tuple[float, ...] = ()
    # Learners ask for the margin at every step boundary, the lags change once per upload: computed once each.
    _memo: dict[tuple[str, int], float] = field(default_factory=dict, compare=False, repr=False)

    def update(self, lag_steps: float) -> HeaderLags:
        """Keep one more lag; a non-finite one is ignored."""
        if not math.isfinite(lag_steps):
            return self
        return HeaderLags((*self.lags[-(WINDOW - 1) :], float(lag_steps)))

    def heard(self, sent_step: float, header_step: float) -> HeaderLags:
        """An UploadReply's ``header_step`` for an upload that left at ``sent_step`` (0 on either side: the clock
        was idle, or the header was never read — nothing to learn)."""
        return self.update(header_step - sent_step) if header_step > 0 and sent_step > 0 else self

    def margin(self, rule: str, sync_every: int) -> float:
        """How many cluster steps earlier than the opening this learner aims its header (0 before any lag)."""
        key = (rule, sync_every)
        if key not in self._memo:
            self._memo[key] = self._margin(rule, sync_every)
        return self._memo[key]

    def _margin(self, rule: str, sync_every: int) -> float:
        if not self.lags:
            return 0.0
        s = sorted(self.lags)
        cap = max(CLIP * s[(len(s) - 1) // 2], 1.0)
        if rule == "mean":
            return max(sum(min(x, cap) for x in s) / len(s), 0.0)
        q = 1.0 - 1.0 / max(sync_every, 1)
        rank = min(max(math.ceil(q * len(s)) - 1, 0), len(s) - 1)
        return max(min(s[rank], cap), 0.0)
