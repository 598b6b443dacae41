"""What the learners trained, from their own events: the budget counted on the side the syncer does not control.

The syncer fixes the run's result when its own count of trained tokens reaches the budget. That count is the
syncer's word: keyed wrongly, or lost in a restore, it says "budget" while the learners train on. Each learner
incarnation logs its cumulative tokens (``step`` every ``learner.step_event_every`` steps, ``learner_stop`` at a
clean end); at any moment ``t`` an incarnation had trained

- at least the most it logged by ``t`` (0 before its first summary), and
- at most the least it logged after ``t``; with nothing logged after ``t``, what its ``learner_stop`` said if it
  stopped by then, else (killed, or the history ends) its last count plus one summary interval — a process killed
  between summaries took fewer steps than that since its last one.

Summed over every incarnation of every learner, that brackets what the cluster had trained (:meth:`Learners.at`).

What the syncer could have counted by ``t`` is less (:meth:`Learners.countable`): a learner reports its cumulative
count every ``learner.report_interval_s``, so each incarnation's count is at least what it had trained a report lag
before the last moment it could report — ``t``, the end of an incarnation that ended, or the start of an
unreachable spell (its own ``syncer_unreachable`` without a ``syncer_reconnected``) — and, for an incarnation that
ended before a syncer restart, before the checkpoint the restart restored (its later reports died with that syncer).

    >>> from trainer import events as ev
    >>> steps = [ev.LearnerStart(ts=0, source="a", learner_id="a", learner_incarnation="i1", pid=1, syncer="s",
    ...                          config_hash=""),
    ...          ev.Step(ts=1, source="a", step=10, loss=1.0, tokens=100, step_time_s=0.1, blocked_s=0),
    ...          ev.Step(ts=2, source="a", step=20, loss=1.0, tokens=200, step_time_s=0.1, blocked_s=0)]
    >>> learners = Learners.of(steps)
    >>> learners.at(1.5, summary_tokens=100)        # between its summaries
    (100, 200)
    >>> learners.at(3.0, summary_tokens=100)        # nothing after: its last count and one interval more
    (200, 300)
    >>> learners.countable(2.4, lag_s=0.5)          # what it had trained by its report 0.5 s before
    100
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainer import events as ev


@dataclass
class Incarnation:
    """One learner incarnation's own record: its cumulative token counts in time order, and its spells unable to
    reach the syncer."""

    learner_id: str
    started: float
    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    stopped_at: float | None = None  # a clean stop (learner_stop)
    ended_at: float | None = None  # its last event, when a newer incarnation of its learner started after it
    unreachable: list[tuple[float, float | None]] = field(default_factory=list)  # (since, until; None: still)

    def low(self, t: float) -> int:
        """The most it had logged by ``t``."""
        i = bisect_right(self.times, t)
        return self.tokens[i - 1] if i else 0

    def high(self, t: float, summary_tokens: int) -> int:
        """The least it could have trained by ``t`` (see the module docstring)."""
        if t < self.started:
            return 0
        i = bisect_right(self.times, t)
        if i < len(self.times):
            return self.tokens[i]
        last = self.tokens[-1] if self.tokens else 0
        return last if self.stopped_at is not None and self.stopped_at <= t else last + summary_tokens

    def could_report_until(self, t: float) -> float:
        """The last moment up to ``t`` it could report: ``t``, its end, or the start of an unreachable spell."""
        end = min([t] + [x for x in (self.ended_at, self.stopped_at) if x is not None])
        for since, until in self.unreachable:
            if since <= end and (until is None or until > end):
                end = since
        return end


@dataclass(frozen=True)
class Learners:
    """Every learner incarnation of a run, from the learners' own events."""

    incarnations: tuple[Incarnation, ...]

    @classmethod
    def of(cls, events: Iterable[ev.Event]) -> Learners:
        current: dict[str, Incarnation] = {}
        every: list[Incarnation] = []
        last_event: dict[str, float] = {}
        for e in events:
            if isinstance(e, ev.LearnerStart):
                old = current.get(e.learner_id)
                if old is not None and old.stopped_at is None:
                    old.ended_at = last_event.get(e.learner_id, old.started)
                current[e.learner_id] = Incarnation(e.learner_id, e.ts)
                every.append(current[e.learner_id])
                last_event[e.learner_id] = e.ts
                continue
            if e.source not in current:
                continue
            inc = current[e.source]
            last_event[e.source] = e.ts
            if isinstance(e, ev.Step | ev.LearnerStop):
                inc.times.append(e.ts)
                inc.tokens.append(max(e.tokens, inc.tokens[-1] if inc.tokens else 0))
                if isinstance(e, ev.LearnerStop):
                    inc.stopped_at = e.ts
            elif isinstance(e, ev.Unreachable):
                if not inc.unreachable or inc.unreachable[-1][1] is not None:
                    inc.unreachable.append((e.ts, None))
            elif isinstance(e, ev.Reconnected) and inc.unreachable and inc.unreachable[-1][1] is None:
                inc.unreachable[-1] = (inc.unreachable[-1][0], e.ts)
        return cls(tuple(every))

    def at(self, t: float, summary_tokens: int) -> tuple[int, int]:
        """(at least, at most) the tokens every incarnation had trained by ``t``."""
        return (
            sum(i.low(t) for i in self.incarnations),
            sum(i.high(t, summary_tokens) for i in self.incarnations),
        )

    def countable(self, t: float, lag_s: float, restores: Sequence[tuple[float, float]] = ()) -> int:
        """The tokens a syncer fixing its result at ``t`` must have counted at least (module docstring);
        ``restores``: (when a syncer restarted, when the checkpoint it restored was written)."""
        total = 0
        for inc in self.incarnations:
            if inc.started > t:
                continue
            until = inc.could_report_until(t)
            for restarted, written in restores:
                if until < restarted <= t:  # it ended before that syncer restart: only the checkpoint knew it
                    until = min(until, written)
            total += inc.low(until - lag_s)
        return total
