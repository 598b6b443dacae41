"""A learner's step protocol, once: what the learner process and deterministic mode's learner decide.

The learner process (``trainer/learner.py``: a JAX step loop, gRPC threads) and deterministic mode's learner
(``chaos/sim/learner_node.py``: a surrogate step, the event loop's messages) both drive one
:class:`LearnerProtocol` per incarnation and do what it returns; they keep only the I/O. It decides

- after an inner step (:meth:`~LearnerProtocol.stepped`): the step and token counts, and which fragments start
  syncing at this boundary (:class:`~trainer.core.learner_book.LearnerBook`: the fragment schedule, on the
  syncer's clock read ahead by the learner's step time and its header lag; the counters ``c_steps`` /
  ``c_tokens`` since the fragment was last received), each a :class:`SyncStarted` (what to upload, and its
  ``sync_start`` event);
- which merged fragments to apply now (:meth:`~LearnerProtocol.ready`: not before τ steps after their sync
  started, never one not newer than held) and how (:func:`take`: overwrite, or α-mixing);
- whether the step loop must wait (:meth:`~LearnerProtocol.waiting`: blocking modes wait for the merges of the
  fragments they synced, unless the syncer said stop);
- an upload's reply (:meth:`~LearnerProtocol.uploaded`, :func:`~trainer.core.replies.upload_outcome`): stop
  waiting for a failed sync, which version of the fragment to long-poll next (:class:`Fetch`), rejoin, stop
  (:class:`Halt`);
- a long poll's reply (:meth:`~LearnerProtocol.fetched`): keep it if newer than what is held or fetched;
- a progress report (:meth:`~LearnerProtocol.report`: :class:`Rejoin` first when the syncer forgot this learner,
  else the :class:`Report` it carries) and its reply (:meth:`~LearnerProtocol.reported`);
- reachability: the first call that fails after a success notes ``syncer_unreachable``, the first success after
  one ``syncer_reconnected`` (:meth:`~LearnerProtocol.down`, :meth:`~LearnerProtocol.up`).

Events come back as :class:`Note` records (a kind of :mod:`trainer.events` and its fields); the shell stamps
time and source. Times (``now``) are the shell's clock: monotonic seconds, or virtual ones. Pure: no JAX, no
threads (the process calls it under one lock), no I/O.

Example (sync-diloco-like: blocking, τ = 0; one fragment synced every 2 steps):
    >>> from trainer.core.fragment_schedule import FragmentSchedule
    >>> p = LearnerProtocol(FragmentSchedule(1, 2, 0, staggered=False), blocking=True, clocked=False,
    ...                     tokens_per_step=64, lookahead_rule="mean")
    >>> p.start(versions=[0], now=0.0)
    >>> p.stepped(now=1.0), p.waiting()
    ([], False)
    >>> [u] = p.stepped(now=2.0)
    >>> (u.start.fragment, u.start.c_steps, u.start.c_tokens), p.waiting()
    ((0, 2, 128), True)
    >>> acts = p.uploaded(u.start, now=2.1, accepted=True, reason="", current_version=0, seconds=0.1, nbytes=8)
    >>> [type(a).__name__ for a in acts], acts[-1]
    (['Note', 'Fetch'], Fetch(fragment=0, version=1))
    >>> p.fetch_due(0), p.fetched(0, version=1, payload="theta-1"), p.fetch_due(0)
    (1, True, None)
    >>> p.ready(), p.waiting(), p.book.counters(0)
    ([(0, 1, 'theta-1')], False, (0, 0))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer import events as ev
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.header_lag import HeaderLags
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.replies import UNREACHABLE, report_outcome, upload_outcome
from trainer.core.rounds import StepClock, sync_step
from trainer.core.step_timer import StepTimes, lookahead_s

ClockReading = tuple[float, float]  # (cluster step, pace in seconds per step), as the syncer's replies carry it


@dataclass(frozen=True)
class Note:
    """An event to emit: its kind (a :mod:`trainer.events` model) and fields; the shell adds time and source."""

    kind: type
    fields: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class SyncStarted:
    """A sync that starts at this step boundary: upload the fragment (:func:`upload_arrays`) with ``start``'s
    header; ``clock_step``, ``lookahead_s``, ``lag_margin_steps``: how the boundary was judged (its event)."""

    start: SyncStart
    clock_step: float
    lookahead_s: float
    lag_margin_steps: float

    def note(self, base_digest: str) -> Note:
        s = self.start
        return Note(
            ev.SyncStartEvent,
            dict(
                fragment=s.fragment,
                base_version=s.base_version,
                c_steps=s.c_steps,
                c_tokens=s.c_tokens,
                step=s.step,
                round=s.round,
                clock_step=self.clock_step,
                lookahead_s=self.lookahead_s,
                lag_margin_steps=self.lag_margin_steps,
                base_digest=base_digest,
            ),
        )


@dataclass(frozen=True)
class Fetch:
    """Long-poll ``fragment`` for at least ``version`` (:meth:`LearnerProtocol.fetch_due` says it is due)."""

    fragment: int
    version: int


@dataclass(frozen=True)
class Halt:
    """The syncer said stop (the token budget is reached): a waiting step loop ends now, a stepping one at its
    next boundary (the step under way is not counted)."""


@dataclass(frozen=True)
class Rejoin:
    """The syncer forgot this learner (it restarted, or the learner was marked left): join again, keeping the
    state, instead of reporting."""


@dataclass(frozen=True)
class Report:
    """What a progress report carries (the process adds its last loss)."""

    step: int
    tokens: int
    step_time_s: float


Action = Note | Fetch | Halt


def take(
    params: dict[str, Any],
    base: dict[str, Any],
    tensors: Mapping[str, Any],
    alpha: float | None,
    as_param: Callable[[Any], Any],
) -> dict[str, Any]:
    """Apply a merged fragment in place: Θ becomes the base (the last global value received); θ becomes Θ
    (``as_param(Θ)``: a device array, a copy), or with α-mixing α·θ + (1 − α)·Θ. Returns what the learner now holds
    that must be the syncer's bits (θ when overwriting, Θ when mixing): the ``apply`` event's digest covers it.

    >>> params, base = {"w": 1.0}, {"w": 0.0}
    >>> take(params, base, {"w": 3.0}, alpha=0.5, as_param=float), params, base
    ({'w': 3.0}, {'w': 2.0}, {'w': 3.0})
    """
    for n, t in tensors.items():
        base[n] = t
        g = as_param(t)
        params[n] = g if alpha is None else alpha * params[n] + (1 - alpha) * g
    held = params if alpha is None else base
    return {n: held[n] for n in tensors}


def upload_arrays(local: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a sync uploads: the outer gradient Θ(base) − θ, or (``base`` None: data-parallel) ``local`` itself,
    the step's gradient.

    >>> upload_arrays({"w": 1.0}, {"w": 3.0}), upload_arrays({"w": 0.5}, None)
    ({'w': 2.0}, {'w': 0.5})
    """
    if base is None:
        return dict(local)
    return {n: base[n] - v for n, v in local.items()}


class LearnerProtocol:
    """One learner incarnation's protocol state: counters, the book, downloads wanted, rejoin and stop, the
    syncer's clock as heard, reachability (see the module docstring)."""

    def __init__(
        self,
        fragment_schedule: FragmentSchedule,
        *,
        blocking: bool,
        clocked: bool,
        tokens_per_step: int,
        lookahead_rule: str,
        step_time_s: float = 0.0,
        step_event_every: int = 1,
    ) -> None:
        """``step_time_s``: the step time reported and looked ahead by until :meth:`stepped` is told another."""
        self.fragment_schedule = fragment_schedule
        self.blocking = blocking
        self.clocked = clocked
        self.tokens_per_step = tokens_per_step
        self.lookahead_rule = lookahead_rule
        self.step_event_every = step_event_every
        self.book: LearnerBook | None = None  # from the state fetch on (start)
        self.step = 0
        self.tokens = 0
        self.step_time_s = step_time_s
        self.blocked_s = 0.0  # waiting for merged fragments since the last step summary
        self.progress = 0.0  # the run's global token progress, as last heard
        self.clock = StepClock()  # the syncer's step clock as last heard, on the shell's clock
        self.boundaries = StepTimes()  # boundary-to-boundary periods (learner.sync_lookahead: quantile)
        self.header_lags = HeaderLags()  # how late its uploads' headers were counted
        n = fragment_schedule.num_fragments
        self.want = [0] * n  # fragment -> the version to long-poll for (0: nothing)
        self.got = [-1] * n  # fragment -> the newest version fetched
        self.need_rejoin = False
        self.stop = False  # the syncer said stop
        self.down_since: float | None = None

    @classmethod
    def for_run(
        cls, algorithm: Any, learner: Any, tokens_per_step: int, step_time_s: float = 0.0
    ) -> LearnerProtocol:
        """The protocol of a run's ``algorithm`` (trainer.core.algorithm.Algorithm) and ``learner`` sections."""
        return cls(
            algorithm.fragment_schedule(),
            blocking=algorithm.blocking,
            clocked=algorithm.clocked,
            tokens_per_step=tokens_per_step,
            lookahead_rule=learner.sync_lookahead,
            step_time_s=step_time_s,
            step_event_every=learner.step_event_every,
        )

    # ---- state and the syncer's clock ------------------------------------------------------------------
    def start(self, versions: list[int], now: float) -> None:
        """The global state arrived (its fragments' versions): the book starts on the clock's reading at ``now``
        (rounds open before it are not this incarnation's)."""
        self.book = LearnerBook(
            self.fragment_schedule,
            versions,
            blocking=self.blocking,
            clocked=self.clocked,
            start_step=self.clock.step_at(now),
        )

    def held(self, fragment: int) -> int:
        return self.book.held[fragment] if self.book is not None else -1

    def heard_clock(self, now: float, reading: ClockReading) -> None:
        """A reply carried the syncer's step clock: extrapolate from it until the next one."""
        self.clock = StepClock.received(now, *reading)

    def joined(self, now: float, progress: float, clock: ClockReading) -> list[Note]:
        """The syncer accepted a Join (the first, or a rejoin that keeps the state)."""
        self.need_rejoin = False
        self.heard_clock(now, clock)
        return self._heard(progress)

    def _heard(self, progress: float) -> list[Note]:
        """The run's progress a reply carried: more is kept and logged with the steps done (re-executing the inner
        steps needs the learning rate each one took: the schedule reads it from the next step on)."""
        if progress <= self.progress:
            return []
        self.progress = progress
        return [Note(ev.ProgressHeard, dict(step=self.step, progress=progress))]

    # ---- reachability ------------------------------------------------------------------------------
    def down(self, now: float, error: str) -> list[Note]:
        """A call got no reply."""
        if self.down_since is not None:
            return []
        self.down_since = now
        return [Note(ev.Unreachable, dict(error=error))]

    def up(self, now: float) -> list[Note]:
        """A call got a reply."""
        if self.down_since is None:
            return []
        since, self.down_since = self.down_since, None
        return [Note(ev.Reconnected, dict(down_s=now - since))]

    # ---- the step loop -----------------------------------------------------------------------------
    def lookahead(self) -> tuple[float, float]:
        """(seconds, header margin in cluster steps): how far ahead of the clock this learner looks for its next
        step boundary (:mod:`trainer.core.step_timer`) and for its upload's header to be counted
        (:mod:`trainer.core.header_lag`)."""
        h = self.fragment_schedule.sync_every
        margin = self.header_lags.margin(self.lookahead_rule, h)
        return lookahead_s(
            self.lookahead_rule, self.boundaries, h, self.step_time_s
        ) + margin * self.clock.pace_s, margin

    def stepped(
        self, now: float, *, step_time_s: float | None = None, period: float | None = None
    ) -> list[SyncStarted]:
        """An inner step ended at ``now``: count it, and return the syncs that start at this boundary.
        ``period``: its boundary-to-boundary time, waits excluded (None: not a measured one); ``step_time_s``:
        the step time to report from now on (None: unchanged)."""
        assert self.book is not None, "stepped before the state arrived"
        self.step += 1
        self.tokens += self.tokens_per_step
        if step_time_s is not None:
            self.step_time_s = step_time_s
        if period is not None:
            self.boundaries = self.boundaries.update(period)
        ahead, margin = self.lookahead()
        starts = self.book.on_step(self.step, self.tokens_per_step, sync_step(self.clock, now, ahead))
        return [SyncStarted(s, self.clock.step_at(now), ahead, margin) for s in starts]

    def ready(self) -> list[tuple[int, int, Any]]:
        """(fragment, version, payload) to apply now (:func:`take`), each marked held: its counters restart."""
        assert self.book is not None
        return self.book.ready(self.step)

    def waiting(self) -> bool:
        """Whether the step loop must wait before its next step (blocking modes; not once told to stop)."""
        return self.book is not None and not self.stop and bool(self.book.waiting_for(self.step))

    def waited(self, seconds: float) -> None:
        self.blocked_s += seconds

    @property
    def summary_due(self) -> bool:
        """Whether this step ends with a ``step`` summary (every ``learner.step_event_every`` steps)."""
        return self.step % self.step_event_every == 0

    def summary(self, loss: float, step_time_s: float, data: ev.DataPosition) -> Note:
        """The ``step`` summary; the time blocked counts again from 0."""
        blocked, self.blocked_s = self.blocked_s, 0.0
        return Note(
            ev.Step,
            dict(
                step=self.step,
                loss=loss,
                tokens=self.tokens,
                step_time_s=step_time_s,
                blocked_s=blocked,
                data=data,
            ),
        )

    def stopped(self, why: str) -> Note:
        return Note(ev.LearnerStop, dict(why=why, step=self.step, tokens=self.tokens))

    # ---- uploads ---------------------------------------------------------------------------------------
    def uploaded(
        self,
        s: SyncStart,
        now: float,
        *,
        accepted: bool,
        reason: str,
        seconds: float,
        nbytes: int,
        current_version: int = -1,
        clock: ClockReading | None = None,
        header_step: float = 0.0,
        sent_step: float = 0.0,
        error: str = "",
    ) -> list[Action]:
        """An upload's reply (``reason`` :data:`~trainer.core.replies.UNREACHABLE` and ``error`` when none came):
        its ``sync_result``; the sync failed (stop waiting for it), the version to fetch next, rejoin, stop."""
        assert self.book is not None
        self.header_lags = self.header_lags.heard(sent_step, header_step)
        out: list[Action] = []
        out += self.down(now, error) if reason == UNREACHABLE else self.up(now)
        if clock is not None:
            self.heard_clock(now, clock)
        result = dict(fragment=s.fragment, base_version=s.base_version, round=s.round, accepted=accepted)
        out.append(Note(ev.SyncResult, dict(result, reason=reason, seconds=seconds, bytes=nbytes)))
        o = upload_outcome(accepted, reason, s.base_version, current_version)
        if o.failed:
            self.book.sync_failed(s.fragment, s.base_version)
        if o.want is not None and o.want > self.want[s.fragment]:
            self.want[s.fragment] = o.want
            out.append(Fetch(s.fragment, o.want))
        if o.rejoin:
            self.need_rejoin = True
        if o.stop:
            self.stop = True
            out.append(Halt())
        return out

    # ---- downloads (a long poll per fragment) --------------------------------------------------------
    def fetch_due(self, fragment: int) -> int | None:
        """The version to long-poll ``fragment`` for, or None when nothing newer than held or fetched is wanted."""
        want = self.want[fragment]
        return want if want > max(self.got[fragment], self.held(fragment)) else None

    def fetched(self, fragment: int, version: int, payload: Any) -> bool:
        """A long poll's reply: kept (offered to the book) if newer than what is held or fetched."""
        assert self.book is not None
        if version <= max(self.got[fragment], self.held(fragment)):
            return False
        self.got[fragment] = version
        self.book.offer(fragment, version, payload)
        return True

    # ---- progress reports ------------------------------------------------------------------------------
    def report(self) -> Rejoin | Report:
        """What the periodic report does now."""
        if self.need_rejoin:
            return Rejoin()
        return Report(self.step, self.tokens, self.step_time_s)

    def reported(
        self, now: float, *, ok: bool, stop: bool, reason: str, progress: float, clock: ClockReading
    ) -> list[Action]:
        """A report's reply: the run's progress, the clock (when accepted), stop or rejoin."""
        out: list[Action] = [*self.up(now), *self._heard(progress)]
        if ok:
            self.heard_clock(now, clock)
        stop_now, rejoin = report_outcome(ok, stop, reason)
        if stop_now:
            self.stop = True
            out.append(Halt())
        if rejoin:
            self.need_rejoin = True
        return out
