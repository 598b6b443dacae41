"""The progress watchdog: a run whose training stops is ended and judged, not left to run into its timeout.

Progress is a merge, or growth of the syncer's token count, seen by polling the syncer's status every
:data:`POLL_S`. A run that makes none for longer than its bound, outside every fault, is ended as any run
ends (active faults healed, every unit stopped) and its history gets a ``stalled`` record
(:class:`chaos.history.Stalled`), which the liveness check judges FAIL, naming the learners that were not
taking part and the last merge (:mod:`chaos.checkers.liveness`). The controller (wall clock) and
deterministic mode (virtual clock) call the same pure function, :func:`stalled`, with the history so far,
the last progress and ``now``.

The bound is in the run's own units (:mod:`chaos.checkers.bounds`): the liveness check's own limit plus the
time a healed unit needs to come back,

    bound = 3 × start-up + rounds × round     (rounds: ``checks.liveness.rounds``, default 25)
    bound = 3 × start-up + max_gap_s          (when the scenario fixes ``checks.liveness.max_gap_s``)

so a run the watchdog ends has also gone longer without a merge than the liveness check allows. With too few
fault-free intervals to measure the round, the start-up stands in for it (a cold start includes a first
round). The quiet time counts from the later of the last progress and the last fault step (an inject's or a
heal's outcome) and does not run while a fault is in effect: a fault may stop training on purpose (a pause of
every learner) for as long as it is scheduled. Before the first merge there is no pace to measure: a run with
no first merge within ``first_merge_s`` of its bring-up (:data:`FIRST_MERGE_S`, the controller's
``steady_timeout_s``) is ended the same way. Once the budget is reached (the syncer's ``finished``) the
watchdog stands down: a settle phase ends at its own deadline. The scenario's ``timeout_s`` stays the
last-resort cap.

Example:
    >>> from chaos.checkers.bounds import RunPace
    >>> watchdog_bound(RunPace(startup_s=4.0, round_s=0.4, intervals=40)).how
    '3 × start-up 4.0s + 25 × round 0.40s, measured in this run'
    >>> round(watchdog_bound(RunPace(4.0, 0.4, 40)).seconds, 6)
    22.0
    >>> p = Progress().observe(merges=3, tokens=900, now=10.0).observe(merges=3, tokens=900, now=11.0)
    >>> p.at
    10.0
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.checkers.bounds import Bound, RunPace, derive_bound, run_pace
from chaos.history import FaultOp, History, Stalled
from chaos.scenario import Liveness
from trainer import events as ev

POLL_S = 0.5  # how often progress is polled (the controller's status poll; deterministic mode's tick)
STARTUPS = 3.0  # start-ups a healed unit may take to come back (as the reintegration check's default)
FIRST_MERGE_S = 240.0  # the first merge's cap: before it there is no pace to derive a bound from


@dataclass(frozen=True)
class Progress:
    """The syncer's merge and token counts at the last poll, and when either last grew (``at``)."""

    merges: int = -1
    tokens: int = -1
    at: float = 0.0

    def observe(self, merges: int, tokens: int, now: float) -> Progress:
        """After a status poll. Growth over the last poll is progress; a drop (a syncer restored from its
        checkpoint) is not, growth after it is.

        >>> Progress(50, 9000, 1.0).observe(40, 8000, 2.0).observe(41, 8000, 3.0).at
        3.0
        """
        grew = merges > self.merges or tokens > self.tokens
        return Progress(merges, tokens, now if grew else self.at)


def watchdog_bound(
    pace: RunPace, liveness: Liveness = Liveness(), *, first_merge_s: float = FIRST_MERGE_S
) -> Bound:
    """How long a run may go without progress, outside faults, before it is ended and judged.

    >>> watchdog_bound(RunPace(4.0, None, 1)).how
    '3 × start-up 4.0s + 25 × round ≤ start-up 4.0s (the round: 1 fault-free interval(s), too few to measure)'
    >>> watchdog_bound(RunPace(4.0, 0.4, 40), Liveness(max_gap_s=10)).how
    "3 × start-up 4.0s + the liveness check's max_gap_s 10.0s"
    >>> watchdog_bound(RunPace(None, None, 0), first_merge_s=240).seconds
    240.0
    """
    if pace.startup_s is None:
        return Bound(
            float(first_merge_s),
            f"no first merge: no pace to measure before it; the first-merge cap {first_merge_s:g}s",
        )
    startup = pace.startup_s
    if liveness.max_gap_s is not None:
        return Bound(
            STARTUPS * startup + liveness.max_gap_s,
            f"{STARTUPS:g} × start-up {startup:.1f}s + the liveness check's max_gap_s {liveness.max_gap_s:.1f}s",
        )
    if pace.round_s is None:
        b = derive_bound(
            None, RunPace(startup, startup, pace.intervals), startups=STARTUPS, rounds=liveness.rounds
        )
        return Bound(
            b.seconds,
            f"{STARTUPS:g} × start-up {startup:.1f}s + {liveness.rounds:g} × round ≤ start-up "
            f"{startup:.1f}s (the round: {pace.intervals} fault-free interval(s), too few to "
            "measure)",
        )
    return derive_bound(None, pace, startups=STARTUPS, rounds=liveness.rounds)


def fault_steps(history: History) -> tuple[bool, float | None]:
    """Whether a fault is in effect (its inject began, did not fail, and no heal has ended), and when the last
    inject or heal ended (None: none has).

    A failed heal ends the fault's window here: the harness can do no more about it, and a run it stalls must
    still be ended and judged.
    """
    active: dict[str, bool] = {}
    last: float | None = None
    for r in history.records:
        if not isinstance(r, FaultOp):
            continue
        if r.action == "inject":
            active[r.fault_id] = r.outcome != "fail"
        elif r.outcome != "invoke":
            active[r.fault_id] = False
        if r.outcome != "invoke":
            last = r.ts if last is None else max(last, r.ts)
    return any(active.values()), last


def stalled(
    history: History,
    progress: Progress,
    now: float,
    liveness: Liveness = Liveness(),
    *,
    first_merge_s: float = FIRST_MERGE_S,
) -> Stalled | None:
    """The ``stalled`` record when the run has made no progress for longer than its bound; None while it may
    go on (or the watchdog stands down: a fault in effect, the budget reached, no bring-up yet)."""
    in_effect, last_step = fault_steps(history)
    up, steady = history.phase("bring_up"), history.phase("steady")
    if in_effect or up is None:
        return None
    if steady is None:
        since = up.ts
        bound = watchdog_bound(RunPace(None, None, 0), liveness, first_merge_s=first_merge_s)
    else:
        since = max(t for t in (steady.ts, progress.at, last_step) if t is not None)
        if now - since <= STARTUPS * (steady.ts - up.ts):  # below any bound: skip measuring the pace
            return None
        bound = watchdog_bound(run_pace(history), liveness, first_merge_s=first_merge_s)
    quiet = now - since
    if bound.seconds is None or quiet <= bound.seconds or history.of(ev.Finished):
        return None
    return Stalled(
        since=since,
        quiet_s=round(quiet, 3),
        bound_s=round(bound.seconds, 3),
        how=bound.how,
        merges=progress.merges,
        tokens=progress.tokens,
        first_merge=steady is not None,
    )
