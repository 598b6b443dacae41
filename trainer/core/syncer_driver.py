"""The syncer's driving loop, once: what is due at ``now``, as actions the shells carry out in order.

The gRPC syncer (``trainer/syncer.py``) and deterministic mode's node (``chaos/sim/syncer_node.py``) both wake at
:func:`next_wake`, then run :func:`tick` and do what each action says; the copies of this loop they had drifted
(deterministic mode fixed its result 3.57× the budget late). One tick:

1. merges every round due, in fragment order — each :class:`Merged` says whether a checkpoint and an eval are due
   after it. Merges happen as the shell takes the actions: a shell that stops taking them (its syncer was taken
   down by a fault the merge count triggered) leaves the rest unmerged, as a crashed process would;
2. once nothing is due and the budget is reached, fixes the result (:class:`ResultFixed`: checkpoint, ``finished``,
   the final eval) — at the merge that reached it, not later;
3. after the result, ends the settle phase when it is over (:class:`SettleOver`).

Example:
    >>> class State:  # the few members tick reads, on a budget of two merges
    ...     merges_total, budget_reached, budget_reached_at, due = 0, False, None, [0, 1]
    ...     def due_merges(self, now): return list(self.due)
    ...     def merge(self, p, now):
    ...         self.due.remove(p); self.merges_total += 1; self.budget_reached = self.merges_total == 2
    ...         return f"merge {self.merges_total}"
    ...     def checkpoint_due(self): return self.merges_total == 2
    ...     def settle(self, now): return False
    >>> [type(a).__name__ for a in tick(State(), 1.0, eval_every=10, result_fixed=False)]
    ['Merged', 'Merged', 'ResultFixed']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Action",
    "Merged",
    "MergeRefused",
    "ResultFixed",
    "SettleOver",
    "tick",
    "next_wake",
    "exit_due",
    "EXIT_POLL_S",
]


@dataclass(frozen=True)
class Merged:
    """A round merged: its record; a checkpoint is due after it; an eval is due (every ``eval_every`` merges)."""

    fragment: int
    record: Any  # trainer.core.syncer_records.MergeRecord
    checkpoint: bool
    evaluate: bool


@dataclass(frozen=True)
class MergeRefused:
    """The merge of ``fragment`` produced non-finite parameters and was dropped (nothing changed)."""

    fragment: int
    why: str


@dataclass(frozen=True)
class ResultFixed:
    """The budget is reached and nothing more is due: checkpoint, ``finished``, final eval (the run's result)."""


@dataclass(frozen=True)
class SettleOver:
    """The settle phase after the result is over: learners are told to stop."""

    seconds: float
    awaited: tuple[str, ...]
    merges_total: int


Action = Merged | MergeRefused | ResultFixed | SettleOver


def tick(state: Any, now: float, *, eval_every: int, result_fixed: bool) -> Iterator[Action]:
    """The actions due at ``now`` (see the module docstring); ``result_fixed``: the shell fixed the result already."""
    for p in state.due_merges(now):
        try:
            rec = state.merge(p, now)
        except FloatingPointError as err:
            yield MergeRefused(p, str(err))
            continue
        yield Merged(p, rec, state.checkpoint_due(), state.merges_total % eval_every == 0)
    if state.budget_reached and not result_fixed and not state.due_merges(now):
        result_fixed = True
        yield ResultFixed()
    if result_fixed and state.settle(now):
        yield SettleOver(now - state.budget_reached_at, tuple(state.awaited(now)), state.merges_total)


def next_wake(state: Any, now: float, *, result_fixed: bool) -> float | None:
    """When the shell must tick next (None: nothing is scheduled; an upload or a restart will wake it): the core's
    next merge or settle deadline, or now when the budget is reached and the result is not fixed yet."""
    if state.budget_reached and not result_fixed:
        return now
    return state.next_deadline(now)


EXIT_POLL_S = 0.2  # how often a syncer whose training is over checks whether it may exit


def exit_due(state: Any, now: float, over_since: float) -> bool:
    """Whether a syncer whose result is fixed and whose training is over (``state.stopped``, since
    ``over_since``) exits now: once every learner has left or gone silent — they collected their stop signal —
    or 2 × the liveness timeout after, not to wait forever for dead ones.

    >>> class Rec:
    ...     left = False
    ...     def active(self, now, timeout): return now - 0.0 <= timeout
    >>> class State:
    ...     class policy: liveness_timeout_s = 5.0
    ...     learners = {"a": Rec()}
    >>> exit_due(State(), 3.0, over_since=2.0), exit_due(State(), 5.5, over_since=2.0), exit_due(State(), 13.0, 2.0)
    (False, True, True)
    """
    timeout = state.policy.liveness_timeout_s
    if now - over_since > 2 * timeout:
        return True
    return all(r.left or not r.active(now, timeout) for r in state.learners.values())
