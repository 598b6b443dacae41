"""Decoupled DiLoCo at scale: learners never wait; the syncer merges whatever has arrived.

Learners. Each learner steps on its own clock (elastic: paused by its
outages; non-elastic: each restart begins a new incarnation after
``rejoin_s``). Its fragment syncs start at the steps the trainer's
:class:`~trainer.core.schedule.FragmentSchedule` names; uploads queue on the
learner's link (a link slower than the fragment rate falls behind). As in the
trainer's :class:`~trainer.core.learner_book.LearnerBook`, a sync is skipped
while the previous one of that fragment is unanswered, the merged fragment is
applied no earlier than τ steps after its sync started, and applying it resets
the fragment's counters — the steps between an upload and that apply are
overwritten, which is why compute goodput stays below 1 even without faults.

Syncer. Per fragment, a round opens with its first upload and merges when the
trainer's :func:`~trainer.core.grace.merge_time` says (quorum K, adaptive grace
window from the same moving averages, at once when every active learner is
in). Uploads whose base lags more than ``max_staleness`` versions are refused;
the learner's counters then carry on into its next sync.

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> from chaos.scale.outages import unit_outages
    >>> cfg = build_scale_config({"duration": 200, "failures": {"mtbi_per_chip": 0},
    ...     "algorithm": {"mode": "decoupled", "num_learners": 2, "num_fragments": 2, "sync_every": 10},
    ...     "workload": {"step_s": 1, "tokens_per_step": 10}})
    >>> t = run(cfg, unit_outages(cfg, 200.0))
    >>> sorted(t.update_times.tolist())[:4]      # fragment 0 after steps 5, 15, ...; fragment 1 after 10, 20, ...
    [5.0, 10.0, 15.0, 20.0]
    >>> round(float(t.update_tokens.sum()) / t.trained_at(200.0), 2)  # τ = 2 of every H = 10 steps overwritten
    0.78
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from chaos.scale.config import ScaleConfig
from chaos.scale.links import comm_times
from chaos.scale.outages import Outages
from chaos.scale.result import Timeline, Trace
from trainer.core.ema import Ema
from trainer.core.grace import QuorumPolicy, Timing, merge_time
from trainer.core.reasons import RejectReason
from trainer.core.replies import upload_outcome
from trainer.core.schedule import FragmentSchedule


@dataclass(frozen=True)
class Uploads:
    """Every fragment sync of every learner, one row each (numpy columns)."""

    learner: np.ndarray
    fragment: np.ndarray
    step: np.ndarray  # the learner's step (within its incarnation) the sync started after
    arrival: np.ndarray  # wall time the upload reached the syncer
    incarnation: np.ndarray
    inc_starts: np.ndarray  # per incarnation: the wall time it began stepping
    lost_at: np.ndarray  # when a failure threw work away ...
    lost_steps: np.ndarray  # ... and how many steps: the one in flight, and for a restart the steps since each
    #                         fragment's last delivered sync (mean over fragments)
    link_skipped: int  # syncs not sent: the previous one of the fragment was still unanswered


def _sync_steps(schedule: FragmentSchedule, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(step, fragment) of every sync start within steps 1..n, in step order."""
    offsets = np.array([schedule.offset(p) for p in range(schedule.num_fragments)])
    cycles = np.arange(0, n // schedule.sync_every + 1) * schedule.sync_every
    steps = (cycles[:, None] + offsets[None, :]).ravel()
    frags = np.broadcast_to(np.arange(len(offsets)), (len(cycles), len(offsets))).ravel()
    keep = steps <= n
    steps, frags = steps[keep], frags[keep]
    order = np.argsort(steps, kind="stable")
    return steps[order], frags[order]


def _send(start: np.ndarray, frags: np.ndarray, up: float, down: float) -> tuple[np.ndarray, np.ndarray]:
    """Which syncs are sent, and when each upload arrives, over one learner's link.

    Uploads go one after another (a_k = max(s_k, a_{k-1}) + up). As in
    LearnerBook, a sync is skipped — nothing sent — while the previous one of
    its fragment is unanswered; the answer is back no earlier than ``down``
    after its upload arrived.

    Example:
        >>> sent, arr = _send(np.array([0.0, 1.0, 2.0, 3.0]), np.array([0, 1, 0, 1]), up=1.5, down=0.5)
        >>> sent.tolist(), arr[sent].tolist()  # fragment 1's answer is back at 3.5: its sync at 3 is skipped
        ([True, True, True, False], [1.5, 3.0, 4.5])
    """
    arrival = start + up
    if len(start) == 0:
        return np.ones(0, dtype=bool), arrival
    gaps_ok = up <= 0 or bool(np.all(np.diff(start) >= up))
    same = {p: start[frags == p] for p in np.unique(frags).tolist()}
    answers_ok = all(len(s) < 2 or np.min(np.diff(s)) >= up + down for s in same.values())
    if gaps_ok and answers_ok:
        return np.ones(len(start), dtype=bool), arrival  # the link keeps up: nothing queues, nothing is skipped
    sent = np.zeros(len(start), dtype=bool)
    free = -math.inf
    back: dict[int, float] = {}
    for k, (s, p) in enumerate(zip(start.tolist(), frags.tolist())):
        if back.get(p, -math.inf) > s:
            continue
        free = max(s, free) + up
        arrival[k] = free
        back[p] = free + down
        sent[k] = True
    return sent, arrival


def learner_uploads(cfg: ScaleConfig, outages: list[Outages], schedule: FragmentSchedule, up: float,
                    down: float) -> Uploads:
    """Generate the uploads of every learner over the run (vectorised per incarnation)."""
    horizon = float(cfg.duration)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in Uploads.__dataclass_fields__
                                         if not k.startswith(("lost", "link", "inc_starts"))}
    lost_at: list[float] = []
    lost_steps: list[float] = []
    link_skipped = 0
    inc_id = 0
    inc_starts: list[float] = []
    for i, o in enumerate(outages):
        step = cfg.step_s(i)
        if o.elastic:
            spans = [(0.0, horizon)]
        else:
            spans = list(zip([0.0, *o.ends.tolist()], [*o.starts.tolist(), horizon]))
        for a, b in spans:
            if b <= a or a >= horizon:
                continue
            if o.elastic:
                # Each pause throws away the step in flight (a failed step is redone).
                lost_at.extend(o.starts.tolist())
                lost_steps.extend((np.mod(o.work_at_starts, step) / step).tolist())
                n = int(o.work_before(horizon) // step)
                steps, frags = _sync_steps(schedule, n)
                start = o.wall_of_work(steps * step)
            else:
                n = int((min(b, horizon) - a) // step)
                steps, frags = _sync_steps(schedule, n)
                start = a + steps * step
            sent, arrival = _send(start, frags, up, down)
            ok = sent & (arrival < min(b, horizon))  # a learner that dies mid-upload never delivers it
            link_skipped += int((~sent).sum())
            # int32 where it fits: a week at 2.4M chips and M = 16 is ~10M uploads.
            for name, col in (("learner", np.full(len(steps), i, dtype=np.int32)),
                              ("fragment", frags.astype(np.int32)), ("step", steps.astype(np.int32)),
                              ("arrival", arrival), ("incarnation", np.full(len(steps), inc_id, dtype=np.int32))):
                cols[name].append(col[ok])
            inc_id += 1
            inc_starts.append(a)
            if not o.elastic and b < horizon:
                last = np.zeros(schedule.num_fragments)
                np.maximum.at(last, frags[ok], steps[ok])
                lost_at.append(b)
                lost_steps.append(float(np.mean(n - last)) + ((b - a) % step) / step)
    return Uploads(**{k: np.concatenate(v) if v else np.empty(0) for k, v in cols.items()},
                   inc_starts=np.asarray(inc_starts), lost_at=np.asarray(lost_at), lost_steps=np.asarray(lost_steps),
                   link_skipped=link_skipped)


class _Active:
    """How many learners are not out at a time (the syncer's liveness view)."""

    def __init__(self, outages: list[Outages]) -> None:
        ev = sorted([(s, -1) for o in outages for s in o.starts.tolist()] +
                    [(e, +1) for o in outages for e in o.ends.tolist()])
        self.times = [t for t, _ in ev]
        counts, c = [], len(outages)
        for _, d in ev:
            c += d
            counts.append(c)
        self.counts = counts
        self.m = len(outages)

    def at(self, t: float) -> int:
        k = bisect.bisect_right(self.times, t)
        return self.m if k == 0 else self.counts[k - 1]


@dataclass
class _Book:
    """One learner's sync state for one fragment, as its LearnerBook holds it."""

    incarnation: int
    inc_start: float
    ref_step: int  # counters count from here: the step the last received version was applied after
    base_version: int  # the version it holds
    answered_at_step: float = 0.0  # its last sync is answered after this step (inf: still waiting)
    waiting_for: int | None = None  # the version its last accepted upload asked for, not merged yet
    sync_step: int = 0  # the step its last sync started after


class _Syncer:
    """The syncer's rounds, one fragment after another; the trainer's ``merge_time`` and ``upload_outcome``
    decide when a round merges and what each learner does with its reply."""

    def __init__(self, cfg: ScaleConfig, outages: list[Outages], down: float, timing: Timing) -> None:
        a = cfg.algorithm
        self.a, self.outages, self.down, self.timing = a, outages, down, timing
        self.policy = QuorumPolicy(a.min_quorum, bool(a.grace), a.grace_gamma, a.grace_cap_s, a.overlap_steps)
        self.active = _Active(outages)
        self.steps_s = [cfg.step_s(i) for i in range(a.num_learners)]
        self.tokens_per_merged_step = cfg.workload.tokens_per_step / a.num_learners / a.num_fragments
        self.merge_times: list[float] = []
        self.merge_tokens: list[float] = []
        self.participants = self.skipped = self.refused = 0

    def fragment(self, rows: Iterable[tuple[int, int, float, int, float]], horizon: float) -> None:
        """Every upload of one fragment, in arrival order: (learner, step, arrival, incarnation, its start)."""
        self.books: dict[int, _Book] = {}
        self.version = 0
        self.members: list[tuple[int, int]] = []  # (learner, c_steps) of the open round
        self.opened = self.quorum_at = self.last_arrival = 0.0
        for row in rows:
            self._merge_due(before=row[2])
            self._offer(*row)
        self._merge_due(before=horizon)

    def _merge_due(self, before: float) -> None:
        while self.members:
            mt = merge_time(self.policy, self.timing, self.quorum_at, len(self.members),
                            self.active.at(self.last_arrival))
            if mt is None or max(mt, self.last_arrival) > before:
                return
            self._close(max(mt, self.last_arrival))

    def _offer(self, i: int, s: int, arr: float, inc: int, inc_start: float) -> None:
        b = self.books.get(i)
        if b is None or b.incarnation != inc:
            b = self.books[i] = _Book(inc, inc_start, 0, self.version)  # a (re)joined learner fetches the current
        elif b.answered_at_step >= s:
            # The previous sync of this fragment is unanswered (LearnerBook.on_step runs before ready() at a
            # step boundary, so one answered at this very step still counts as in flight): skip, counters carry on.
            self.skipped += 1
            return
        b.sync_step = s
        accepted = self.version - b.base_version <= self.a.max_staleness
        out = upload_outcome(accepted, "" if accepted else RejectReason.STALE_VERSION.value, b.base_version,
                             self.version)
        if not accepted:
            self.refused += 1
        else:
            if not self.members:
                self.opened, self.quorum_at = arr, math.inf
            self.members.append((i, max(0, s - b.ref_step)))
            self.last_arrival = arr
            if len(self.members) == self.a.min_quorum:
                self.quorum_at = arr
        assert out.want is not None
        if out.want <= self.version:
            # What it asked for exists: the reply brings it. A refused sync is failed, so no overlap wait.
            self._receive(b, i, arr + self.down, self.version, overlap=not out.failed)
        else:
            b.answered_at_step, b.waiting_for = math.inf, out.want

    def _close(self, at: float) -> None:
        self.version += 1
        self.merge_times.append(at)
        self.merge_tokens.append(sum(c for _, c in self.members) * self.tokens_per_merged_step)
        self.participants += len(self.members)
        q = self.quorum_at - self.opened
        if self.timing.t_quorum.value != q:  # an EMA of an unchanged sample is unchanged: skip the work
            self.timing = self.timing.observe_quorum(q)
        for i, _ in self.members:
            b = self.books[i]
            if b.waiting_for == self.version:
                self._receive(b, i, at + self.down, self.version)
        self.members.clear()

    def _receive(self, b: _Book, learner: int, at: float, version: int, overlap: bool = True) -> None:
        """The learner got ``version`` back at ``at``: applied at the next step boundary, not before τ steps
        after its sync started unless that sync failed (LearnerBook.ready), and its counters reset."""
        o = self.outages[learner]
        work = o.work_before(at) if o.elastic else at - b.inc_start
        earliest = b.sync_step + self.a.overlap_steps if overlap else 0
        b.answered_at_step = max(math.ceil(work / self.steps_s[learner] - 1e-9), earliest)
        b.ref_step = int(b.answered_at_step)
        b.base_version = version
        b.waiting_for = None


def run(cfg: ScaleConfig, outages: list[Outages], timeline: Timeline | None = None,
        progress: Callable[[float], None] | None = None) -> Trace:
    a, w = cfg.algorithm, cfg.workload
    m, nfrag = a.num_learners, a.num_fragments
    schedule = FragmentSchedule(nfrag, a.sync_every, a.overlap_steps, bool(a.staggered))
    comm = comm_times(cfg)
    up, down = comm.fragment_up_s, comm.fragment_down_s
    steps_s = [cfg.step_s(i) for i in range(m)]
    tokens_per_learner_step = w.tokens_per_step / m
    horizon = float(cfg.duration)
    ups = learner_uploads(cfg, outages, schedule, up, down)
    syncer = _Syncer(cfg, outages, down, Timing(t_step=Ema(value=sum(steps_s) / m)).observe_upload(up))
    for p in range(nfrag):
        sel = np.flatnonzero(ups.fragment == p)
        sel = sel[np.argsort(ups.arrival[sel], kind="stable")]
        syncer.fragment(zip(ups.learner[sel].tolist(), ups.step[sel].tolist(), ups.arrival[sel].tolist(),
                            ups.incarnation[sel].tolist(), ups.inc_starts[ups.incarnation[sel]].tolist()), horizon)
        if progress is not None:
            progress((p + 1) / nfrag)
    merge_times, merge_tokens = syncer.merge_times, syncer.merge_tokens
    participants, skipped, refused = syncer.participants, syncer.skipped, syncer.refused
    if timeline is not None:
        for i, o in enumerate(outages):
            timeline.add_unit(i, o, 0.0, horizon)
    n_merges = len(merge_times)
    order = np.argsort(ups.lost_at)
    lost_t, lost_cum = ups.lost_at[order], np.concatenate([[0.0], np.cumsum(ups.lost_steps[order])])

    def trained_at(t: float) -> float:
        return tokens_per_learner_step * sum(o.work_before(t) / s for o, s in zip(outages, steps_s))

    def useful_at(t: float) -> float:
        return trained_at(t) - tokens_per_learner_step * float(lost_cum[np.searchsorted(lost_t, t, side="right")])

    return Trace(np.asarray(merge_times), np.asarray(merge_tokens), trained_at=trained_at, useful_at=useful_at,
                 failure_times=np.concatenate([o.failure_times for o in outages]), timeline=timeline,
                 details={"uploads": float(len(ups.step)), "skipped_syncs": float(skipped + ups.link_skipped),
                          "refused_stale": float(refused), "merges": float(n_merges),
                          "participants_per_merge": participants / n_merges if n_merges else 0.0,
                          "fragment_round_trip_s": comm.fragment_round_trip_s,
                          "fragment_period_s": a.sync_every * w.step_s / nfrag})
