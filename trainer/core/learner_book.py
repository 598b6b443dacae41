"""A learner's bookkeeping per fragment: counters, held versions, syncs in flight.

Pure: the learner process feeds it steps and received fragments and acts on
what it returns. The book decides

- which fragments start syncing after a step, with their round, base version
  and counters ``c_steps`` / ``c_tokens`` since the fragment was last
  received. On the syncer's clock (``clocked``, decoupled mode) a fragment
  syncs at the first step boundary whose cluster step (the caller passes
  :func:`~trainer.core.rounds.sync_step`: just under one own step ahead, so
  the last boundary at or before the opening) has reached one of its rounds'
  openings, so learners of different speeds stay on one fragment schedule and a slow
  one simply covers fewer steps;
  otherwise at the learner's own steps offset(p) + r·H;
- when a received global fragment may be applied: not before τ steps after
  its sync started (the overlap), and only if newer than the one held;
- in blocking modes (synchronous DiLoCo, data-parallel), which fragments the
  step loop must wait for.

Example:
    >>> from trainer.core.fragment_schedule import FragmentSchedule
    >>> b = LearnerBook(FragmentSchedule(2, 2, 1, staggered=True), versions=[0, 0], blocking=False)
    >>> b.on_step(step=1, tokens=64)
    [SyncStart(fragment=0, base_version=0, c_steps=1, c_tokens=64, step=1, round=0)]
    >>> b.offer(0, version=1, payload="theta")
    >>> b.ready(step=1)  # τ = 1: not before step 2
    []
    >>> b.ready(step=2)
    [(0, 1, 'theta')]
    >>> b.counters(0)   # reset on receipt
    (0, 0)

On the clock, the cluster step decides (here 3 own steps cover 4 cluster steps):
    >>> c = LearnerBook(FragmentSchedule(2, 2, 1, staggered=True), versions=[0, 0], blocking=False, clocked=True)
    >>> c.on_step(step=1, tokens=64, cluster_step=0.5)
    []
    >>> [(s.fragment, s.round, s.c_steps) for s in c.on_step(step=2, tokens=64, cluster_step=2.1)]
    [(0, 0, 2), (1, 0, 2)]

Cut off from the syncer, a learner's copy of its clock ran ahead to round 4 (the upload was refused); the
syncer's clock, heard again, is in round 0: the learner syncs at round 1's opening, not at round 5's:
    >>> d = LearnerBook(FragmentSchedule(1, 4, 1, staggered=True), versions=[0], blocking=False, clocked=True)
    >>> [s.round for s in d.on_step(step=1, tokens=64, cluster_step=21.0)]
    [4]
    >>> d.sync_failed(0, base_version=0)
    >>> d.on_step(step=2, tokens=64, cluster_step=5.0), d.rewound
    ([], 1)
    >>> [(s.round, s.c_steps) for s in d.on_step(step=3, tokens=64, cluster_step=8.5)]
    [(1, 3)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.rounds import round_at

# A clock heard from the syncer may be a little behind this learner's extrapolation of it (a round it has just
# claimed by the lookahead): one round ahead is normal; more means the clock this learner followed ran ahead.
REWIND_AFTER_ROUNDS = 1


@dataclass(frozen=True)
class SyncStart:
    fragment: int
    base_version: int
    c_steps: int
    c_tokens: int
    step: int
    round: int = 0


@dataclass
class _InFlight:
    base_version: int
    apply_step: int
    failed: bool = False


class LearnerBook:
    """Per-fragment counters and sync state of one learner incarnation."""

    def __init__(
        self,
        fragment_schedule: FragmentSchedule,
        versions: list[int],
        blocking: bool,
        clocked: bool = False,
        start_step: float = 0.0,
    ) -> None:
        """``clocked``: sync on the cluster step clock; ``start_step``: its reading at join (rounds open
        before it are not this incarnation's: it syncs from the next opening on)."""
        if len(versions) != fragment_schedule.num_fragments:
            raise ValueError(f"{len(versions)} versions for {fragment_schedule.num_fragments} fragments")
        self.fragment_schedule = fragment_schedule
        self.blocking = blocking
        self.clocked = clocked
        self._round = [
            round_at(fragment_schedule, p, start_step) if clocked else -1
            for p in range(fragment_schedule.num_fragments)
        ]
        self.held = list(versions)
        self._steps = [0] * fragment_schedule.num_fragments
        self._tokens = [0] * fragment_schedule.num_fragments
        self._in_flight: dict[int, _InFlight] = {}
        self._inbox: dict[int, tuple[int, Any]] = {}
        self.skipped = 0  # syncs not started because the previous one of that fragment was in flight
        self.rewound = 0  # fragments whose claimed round was put back onto the cluster's clock (see _due)

    def counters(self, fragment: int) -> tuple[int, int]:
        return self._steps[fragment], self._tokens[fragment]

    def _due(self, step: int, cluster_step: float | None) -> list[tuple[int, int]]:
        """(fragment, round) pairs whose sync starts after this step."""
        if not self.clocked:
            return [(p, round_at(self.fragment_schedule, p, step)) for p in self.fragment_schedule.due(step)]
        if cluster_step is None:
            raise ValueError("a clocked LearnerBook needs the cluster step at every step")
        due = []
        for p in range(self.fragment_schedule.num_fragments):
            r = round_at(self.fragment_schedule, p, cluster_step)
            if self._round[p] > r + REWIND_AFTER_ROUNDS:
                # Rounds claimed on a clock that ran ahead: a learner cut off from the syncer extrapolates at the
                # last pace it heard, and the cluster may have slowed since (or a restored syncer's clock is
                # behind). The syncer refuses them as future rounds; keeping them would make this learner wait
                # until the cluster reaches its own count (40 s in a compose run) — rejoin the cluster's fragment schedule.
                self._round[p] = r
                self.rewound += 1
            if r > self._round[p]:  # one sync for the newest open round, however many opened since the last step
                self._round[p] = r
                due.append((p, r))
        return due

    def on_step(self, step: int, tokens: int, cluster_step: float | None = None) -> list[SyncStart]:
        """Count one inner step of ``tokens`` tokens; return the syncs that start now."""
        for p in range(self.fragment_schedule.num_fragments):
            self._steps[p] += 1
            self._tokens[p] += tokens
        starts = []
        for p, r in self._due(step, cluster_step):
            f = self._in_flight.get(p)
            if f is not None and not f.failed:
                # The previous sync of p is unanswered. A second upload would reuse its
                # idempotency key (same base version), so skip: the counters carry on.
                self.skipped += 1
                continue
            starts.append(SyncStart(p, self.held[p], self._steps[p], self._tokens[p], step, r))
            self._in_flight[p] = _InFlight(self.held[p], self.fragment_schedule.apply_step(step))
        return starts

    def sync_failed(self, fragment: int, base_version: int) -> None:
        """The upload of this sync was not merged (unreachable, refused): don't wait for it."""
        f = self._in_flight.get(fragment)
        if f is not None and f.base_version == base_version:
            f.failed = True

    def offer(self, fragment: int, version: int, payload: Any) -> None:
        """A global fragment arrived; keep the newest until it may be applied."""
        if version <= self.held[fragment]:
            return
        cur = self._inbox.get(fragment)
        if cur is None or version > cur[0]:
            self._inbox[fragment] = (version, payload)

    def ready(self, step: int) -> list[tuple[int, int, Any]]:
        """(fragment, version, payload) to apply after ``step``; marks them held and resets counters."""
        out = []
        for p in sorted(self._inbox):
            version, payload = self._inbox[p]
            f = self._in_flight.get(p)
            if f is not None and not f.failed and step < f.apply_step:
                continue  # the overlap: keep computing until τ steps have passed
            del self._inbox[p]
            if version <= self.held[p]:
                continue
            self.held[p] = version
            self._steps[p] = 0
            self._tokens[p] = 0
            if f is not None and f.base_version < version:
                del self._in_flight[p]
            out.append((p, version, payload))
        return out

    def waiting_for(self, step: int) -> list[int]:
        """Blocking modes: fragments the step loop must wait for before stepping on."""
        if not self.blocking:
            return []
        return sorted(p for p, f in self._in_flight.items() if not f.failed and step >= f.apply_step)

    def in_flight(self) -> dict[int, int]:
        """fragment -> base version of syncs not yet answered."""
        return {p: f.base_version for p, f in self._in_flight.items() if not f.failed}
