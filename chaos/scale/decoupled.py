"""Decoupled DiLoCo at scale: learners never wait; the syncer merges each scheduled round once.

Learners. Each learner steps at its own speed (elastic: paused by its
outages; non-elastic: each restart begins a new incarnation after
``rejoin_s``). Its fragment syncs follow the syncer's step clock, as in the
trainer (:mod:`trainer.core.rounds`): round r of fragment p opens at cluster
step offset(p) + r·H, the cluster's pace being the lower median of the
learners' step times, and a learner syncs p at its last step boundary at or
before the opening less its header's lag (its steps have no jitter and its
clock no error here, so either of the trainer's lookaheads,
:mod:`trainer.core.step_timer`, is its step time and the lag
:mod:`trainer.core.header_lag` measures is the link's latency; one sync for the
newest round when a pause let several open; an incarnation syncs from the
first round opening after it starts). Uploads
queue on the learner's link (a link slower than the fragment rate falls
behind). As in the trainer's :class:`~trainer.core.learner_book.LearnerBook`,
a sync is skipped while the previous one of that fragment is unanswered, the
merged fragment is applied no earlier than τ steps after its sync started,
and applying it resets the fragment's counters — the steps between an upload
and that apply are overwritten, which is why compute goodput stays below 1
even without faults.

Syncer. Per fragment, the pending round merges exactly once, when the
trainer's :func:`~trainer.core.grace.merge_time` says (quorum K, adaptive
grace window from the same moving averages counted from the round's opening,
never before it opens, at once when every active learner is in), taking every
upload whose *header* arrived by then and waiting for those bodies
(:mod:`trainer.core.inflight`; here every body takes the same wire time, which
is within the hold, so the merge is at the later of that time and the last
member's body). The K-th member's body sets the quorum, members taken in
header order. An upload whose header comes after the merge time is not in the
round, even if the real syncer would still take its body while it waits for
the others. An upload for a round that has merged is late: refused (``late_round``) by default, or
with ``late_uploads: carry`` carried into the next round (it never opens one
early: that round opens on the clock, as in the trainer); one whose base lags
more than ``max_staleness`` versions is refused as stale; a refused learner
fetches the current fragment. Contributions of a round short of its
quorum carry into the next round, as in
:class:`~trainer.core.syncer_state.SyncerState`.

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

Why one module: it is one event-driven model (learners, the syncer's rounds, recovery) whose parts share
one event queue and clock.
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from chaos.scale.config import ScaleConfig
from chaos.scale.links import comm_times
from chaos.scale.outages import Outages
from chaos.scale.result import Timeline, Trace
from trainer.core.ema import Ema
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.grace import Timing, grace_seconds, merge_time_with_grace
from trainer.core.reasons import RejectReason
from trainer.core.replies import upload_outcome
from trainer.core.rounds import cluster_pace, round_at, round_opens


@dataclass(frozen=True)
class FragmentUploads:
    """One fragment's syncs from every learner, one row each (numpy columns), learner incarnation by incarnation
    and each in step order (the syncer takes them in header order)."""

    learner: np.ndarray
    incarnation: np.ndarray
    inc_start: np.ndarray  # the wall time the incarnation began stepping
    step: np.ndarray  # the learner's step (within its incarnation) the sync started after
    round: np.ndarray  # the fragment's round on the syncer's clock
    arrival: np.ndarray  # wall time the upload reached the syncer (its last byte)
    header: np.ndarray  # wall time its header reached the syncer (its first byte: one latency after it left)


@dataclass(frozen=True)
class Incarnation:
    """One learner incarnation's delivered syncs (numpy columns), fragment by fragment, each in step order: fragment
    p's rows are ``bounds[p]:bounds[p + 1]``."""

    learner: int
    index: int
    start: float  # the wall time it began stepping
    step: np.ndarray
    round: np.ndarray
    arrival: np.ndarray
    bounds: np.ndarray


@dataclass(frozen=True)
class Uploads:
    """Every fragment sync of every learner, kept per incarnation and handed out per fragment: a week at 2.4M
    chips is ~5M uploads, and columns of them all at once are hundreds of MB of fresh memory (each page's first
    touch costs ~27 µs on this machine's VM: more than the sorting)."""

    incarnations: list[Incarnation]
    wire: float  # a header arrives this long before its body's last byte
    lost_at: np.ndarray  # when a failure threw work away ...
    lost_steps: np.ndarray  # ... and how many steps: the one in flight, and for a restart the steps since each
    #                         fragment's last delivered sync (mean over fragments)
    link_skipped: int  # syncs not sent: the previous one of the fragment was still unanswered

    def __len__(self) -> int:
        return sum(len(c.step) for c in self.incarnations)

    def fragment(self, p: int) -> FragmentUploads:
        """Fragment ``p``'s uploads, incarnation by incarnation."""
        parts = [(c, c.bounds[p], c.bounds[p + 1]) for c in self.incarnations]
        counts = [int(hi - lo) for _, lo, hi in parts]
        arrival = np.concatenate([c.arrival[lo:hi] for c, lo, hi in parts] or [np.empty(0)])
        return FragmentUploads(
            learner=np.repeat(np.array([c.learner for c, _, _ in parts], dtype=np.int32), counts),
            incarnation=np.repeat(np.array([c.index for c, _, _ in parts], dtype=np.int32), counts),
            inc_start=np.repeat(np.array([c.start for c, _, _ in parts], dtype=float), counts),
            step=np.concatenate([c.step[lo:hi] for c, lo, hi in parts] or [np.empty(0, dtype=np.int32)]),
            round=np.concatenate([c.round[lo:hi] for c, lo, hi in parts] or [np.empty(0, dtype=np.int32)]),
            arrival=arrival,
            header=arrival - self.wire,
        )


def _clock_syncs(
    fragment_schedule: FragmentSchedule,
    pace: float,
    step_s: float,
    walls: np.ndarray,
    joined: float,
    lag_s: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, fragment, round) of every sync start, in step order, for a learner whose step k ends at
    ``walls[k - 1]`` and whose incarnation began at ``joined``.

    Round r of fragment p opens at wall time (offset(p) + r·H)·``pace``; the learner syncs at its last
    boundary at or before the opening less its header's lag ``lag_s`` (:func:`~trainer.core.rounds.sync_step`,
    :mod:`trainer.core.header_lag`: here the link's latency, the clocks being exact), one sync per
    boundary for the newest round, only for rounds opening after it joined.

    Example: a learner at half the cluster's pace still syncs every round, at its own steps 1, 2, 3, ...
        >>> from trainer.core.fragment_schedule import FragmentSchedule
        >>> fragment_schedule = FragmentSchedule(2, 4, 1, staggered=True)  # fragment 0 opens at steps 2, 6, 10; 1 at 4, 8
        >>> k, p, r = _clock_syncs(fragment_schedule, 1.0, 2.0, np.arange(1, 6) * 2.0, joined=0.0)
        >>> k.tolist(), p.tolist(), r.tolist()
        ([1, 2, 3, 4, 5], [0, 1, 0, 1, 0], [0, 0, 1, 1, 2])

    A pause between its steps 3 and 4 let rounds 1, 2 of fragment 0 and 0, 1 of fragment 1 open: after it,
    one sync per fragment, for the newest round:
        >>> k, p, r = _clock_syncs(fragment_schedule, 1.0, 1.0, np.array([1.0, 2.0, 3.0, 11.0]), joined=0.0)
        >>> k.tolist(), p.tolist(), r.tolist()
        ([2, 4, 4], [0, 0, 1], [0, 2, 1])
    """
    groups = _fragment_syncs(fragment_schedule, pace, step_s, walls, joined, lag_s)
    if not groups:
        return (np.empty(0, dtype=np.int64),) * 3
    steps = np.concatenate([k for _, k, _ in groups])
    frags = np.concatenate([np.full(len(k), p) for p, k, _ in groups])
    rounds = np.concatenate([r for _, _, r in groups])
    order = np.argsort(steps, kind="stable")
    return steps[order], frags[order], rounds[order]


def _fragment_syncs(
    fragment_schedule: FragmentSchedule,
    pace: float,
    step_s: float,
    walls: np.ndarray,
    joined: float,
    lag_s: float = 0.0,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """:func:`_clock_syncs` fragment by fragment: (fragment, steps, rounds), each in step order; fragments with
    no sync left out."""
    n = len(walls)
    out: list[tuple[int, np.ndarray, np.ndarray]] = []
    if n == 0:
        return out
    for p in range(fragment_schedule.num_fragments):
        first = (
            round_at(fragment_schedule, p, joined / pace) + 1
        )  # as LearnerBook: rounds open at its join aren't its own
        # as sync_step:
        last = round_at(fragment_schedule, p, math.nextafter((walls[-1] + step_s + lag_s) / pace, -math.inf))
        if last < first:
            continue
        r = np.arange(first, last + 1)
        idx = np.searchsorted(walls, round_opens(fragment_schedule, p, r) * pace - step_s - lag_s, side="right")
        ok = idx < n
        r, idx = r[ok], idx[ok]
        newest = np.r_[idx[1:] != idx[:-1], True]  # several rounds at one boundary: the newest only
        if newest.any():
            out.append((p, idx[newest] + 1, r[newest]))
    return out


def _link_keeps_up(starts: list[np.ndarray], up: float, down: float) -> bool:
    """Whether one learner's link sends every sync at once: uploads starting at ``starts`` (one array per
    fragment, each in time order) never queue behind each other (``up`` apart or more), and no fragment's sync
    starts before its previous one's answer is back (``up + down``)."""
    # Each fragment's starts are already in order: a stable sort (numpy's merges runs) takes ~1/10 the time.
    every = np.sort(np.concatenate(starts), kind="stable") if starts else np.empty(0)
    gaps_ok = up <= 0 or bool(np.all(np.diff(every) >= up))
    return gaps_ok and all(len(s) < 2 or np.min(np.diff(s)) >= up + down for s in starts)


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
    if _link_keeps_up([start[frags == p] for p in np.unique(frags).tolist()], up, down):
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


def learner_uploads(
    cfg: ScaleConfig,
    outages: list[Outages],
    fragment_schedule: FragmentSchedule,
    up: float,
    down: float,
    pace: float,
) -> Uploads:
    """Generate the uploads of every learner over the run (vectorised per incarnation), on a clock of
    ``pace`` seconds per cluster step."""
    wire = max(up - cfg.network.latency, 0.0)  # a header arrives this long before its body's last byte
    horizon = float(cfg.duration)
    nfrag = fragment_schedule.num_fragments
    incarnations: list[Incarnation] = []
    lost_at: list[float] = []
    lost_steps: list[float] = []
    link_skipped = 0
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
                walls = o.wall_of_work(np.arange(1, n + 1) * step)
            else:
                n = int((min(b, horizon) - a) // step)
                walls = a + np.arange(1, n + 1) * step
            groups = _fragment_syncs(fragment_schedule, pace, step, walls, a, lag_s=cfg.network.latency)
            end = min(b, horizon)  # a learner that dies mid-upload never delivers it
            if _link_keeps_up([walls[k - 1] for _, k, _ in groups], up, down):
                # Nothing queues or is skipped: each fragment's uploads arrive `up` after they start.
                delivered = []
                for p, k, r in groups:
                    arrival = walls[k - 1] + up
                    ok = arrival < end
                    delivered.append((p, k[ok], r[ok], arrival[ok]))
            else:
                steps, frags, rounds = _clock_syncs(fragment_schedule, pace, step, walls, a, cfg.network.latency)
                sent, arrival = _send(walls[steps - 1], frags, up, down)
                link_skipped += int((~sent).sum())
                ok = sent & (arrival < end)
                delivered = [
                    (p, steps[sel], rounds[sel], arrival[sel])
                    for p in range(nfrag)
                    if len(sel := np.flatnonzero(ok & (frags == p)))
                ]
            del walls
            counts = np.zeros(nfrag, dtype=np.int64)
            last = np.zeros(nfrag)  # each fragment's last delivered sync
            for p, k, _, _ in delivered:
                counts[p] = len(k)
                last[p] = k[-1] if len(k) else 0
            # Fragment by fragment, each in step order; int32 where it fits.
            incarnations.append(
                Incarnation(
                    learner=i,
                    index=len(incarnations),
                    start=a,
                    step=np.concatenate([k for _, k, _, _ in delivered] or [np.empty(0)]).astype(np.int32),
                    round=np.concatenate([r for _, _, r, _ in delivered] or [np.empty(0)]).astype(np.int32),
                    arrival=np.concatenate([t for _, _, _, t in delivered] or [np.empty(0)]),
                    bounds=np.r_[0, np.cumsum(counts)],
                )
            )
            if not o.elastic and b < horizon:
                lost_at.append(b)
                lost_steps.append(float(np.mean(n - last)) + ((b - a) % step) / step)
    return Uploads(
        incarnations,
        wire=wire,
        lost_at=np.asarray(lost_at),
        lost_steps=np.asarray(lost_steps),
        link_skipped=link_skipped,
    )


class _Active:
    """How many learners are not out at a time (the syncer's liveness view)."""

    def __init__(self, outages: list[Outages]) -> None:
        ev = sorted(
            [(s, -1) for o in outages for s in o.starts.tolist()]
            + [(e, +1) for o in outages for e in o.ends.tolist()]
        )
        self.times = [t for t, _ in ev]
        counts, c = [], len(outages)
        for _, d in ev:
            c += d
            counts.append(c)
        self.counts = counts
        self.m = len(outages)

    def span(self, t: float) -> tuple[float, float, int]:
        """``(lo, hi, n)``: ``n`` learners are not out at every time in ``[lo, hi)``, ``t`` among them (the
        syncer asks once per accepted upload, and the answer changes only at an outage's start or end)."""
        k = bisect.bisect_right(self.times, t)
        lo = -math.inf if k == 0 else self.times[k - 1]
        hi = math.inf if k == len(self.times) else self.times[k]
        return lo, hi, self.m if k == 0 else self.counts[k - 1]


@dataclass(frozen=True)
class FragmentRounds:
    """What the syncer did with one fragment's uploads: its merges (when, and the tokens each merged) and its
    counts of uploads per outcome."""

    merge_times: list[float]
    merge_tokens: list[float]
    participants: int  # uploads merged, over all its merges
    skipped: int  # syncs a learner skipped: its previous one of the fragment was unanswered
    refused: int  # stale or late, refused
    late: int  # of those, late for a round that had merged
    carried: int  # late, carried into the next round (late_uploads: carry)


class _Syncer:
    """The syncer's rounds, fragment by fragment; the trainer's ``merge_time`` (with its grace window kept
    while the timing is unchanged) and ``upload_outcome`` decide when a round merges and what each learner does
    with its reply. Fragments share nothing in it: each one's rounds start from the same timing (``timing``) and
    move its moving averages on their own (the real syncer's are shared by every fragment, interleaved in time:
    docs/scale-simulator.md, "What is not modelled"), so fragments can be simulated in any order, or at once.

    Each learner's sync state for the fragment is what its LearnerBook holds, kept as one list per field indexed
    by learner (the hot loop runs once per upload: millions in a simulated week, so no object per upload):
    its incarnation, ``ref`` (counters count from this step: the one the last received version
    was applied after), ``base`` (the version it holds), ``answered`` (its last sync is answered after this step;
    inf while waiting), ``waiting`` (the version its last accepted upload asked for, not merged yet; -1: none)
    and ``synced`` (the step its last sync started after).
    """

    def __init__(
        self,
        cfg: ScaleConfig,
        outages: list[Outages],
        down: float,
        timing: Timing,
        fragment_schedule: FragmentSchedule,
        pace: float,
    ) -> None:
        a = cfg.algorithm
        self.a, self.outages, self.down, self.timing = a, outages, down, timing
        self.fragment_schedule, self.pace = fragment_schedule, pace
        self.policy = a.quorum
        self.active = _Active(outages)
        self.steps_s = [cfg.step_s(i) for i in range(a.num_learners)]
        self.tokens_per_merged_step = cfg.workload.tokens_per_step / a.num_learners / a.num_fragments
        self.carry = a.late_uploads == "carry"

    def fragment(
        self, p: int, rows: Iterable[tuple[int, int, float, float, int, float, int]], horizon: float
    ) -> FragmentRounds:
        """The rounds of fragment ``p`` from every upload of it, in header order: (learner, step, header,
        arrival, incarnation, its start, round)."""
        m = len(self.outages)
        inc_of = [-1] * m
        ref, base, synced, waiting = [0] * m, [0] * m, [0] * m, [-1] * m
        answered: list[float] = [0.0] * m
        # Each learner's work before a time (Outages.work_before; a non-elastic incarnation's: time since it began)
        # is that time less `up_down` throughout [up_lo, up_hi): kept, since merges ask about nearby times.
        up_lo, up_hi, up_down = [math.inf] * m, [-math.inf] * m, [0.0] * m
        steps_s, down, floor = self.steps_s, self.down, self.a.overlap_floor
        k_min, max_staleness, carry = self.a.min_quorum, self.a.max_staleness, self.carry
        active_span, policy = self.active.span, self.policy
        active_lo, active_hi, active = math.inf, -math.inf, 0  # active's value, valid while lo <= time < hi
        # upload_outcome(...).want less the syncer's version, by (reason, base - version)
        wants: dict[tuple[str, int], int | None] = {}
        want_current = upload_outcome(True, "", 0, 0).want  # an accepted upload based on the current version
        assert want_current is not None
        merge_times: list[float] = []
        merge_tokens: list[float] = []
        tokens_per_step = self.tokens_per_merged_step
        fragment_schedule, pace, outages, inf, ceil = (
            self.fragment_schedule,
            self.pace,
            self.outages,
            math.inf,
            math.ceil,
        )
        # Counters kept in locals while the loop runs (attribute writes cost, once per upload).
        skipped = refused = late_refused = carried = participants = 0
        late_reason, stale_reason = RejectReason.LATE_ROUND.value, RejectReason.STALE_VERSION.value
        timing = self.timing
        grace = grace_seconds(policy, timing)
        version, round_, last_round = 0, -1, -1
        opened = last_arrival = 0.0
        quorum_at: float | None = None
        members: dict[int, int] = {}  # learner -> c_steps in the pending round (a newer upload replaces)

        def receive(i: int, at: float, version: int, overlap: bool = True) -> None:
            """Learner ``i`` got ``version`` back at ``at``: applied at the next step boundary, not before τ steps
            after its sync started unless that sync failed (LearnerBook.ready), and its counters reset."""
            if up_lo[i] <= at < up_hi[i]:  # its work so far is at - up_down[i] within [up_lo, up_hi)
                work = at - up_down[i]
            else:
                o = outages[i]
                up_lo[i], up_hi[i], up_down[i] = o.up_span(at)
                work = o.work_before(at)  # (at - up_down[i] where the new span holds at; not while it is out)
            step = ceil(work / steps_s[i] - 1e-9)
            earliest = synced[i] + floor if overlap else 0
            answered[i] = ref[i] = step if step > earliest else earliest
            base[i], waiting[i] = version, -1

        # When the pending round merges: merge_time of its state, kept as it changes (on an accepted upload) and
        # compared with every next header (inf: no quorum yet, merge_time says None).
        due = inf

        def close() -> None:
            nonlocal version, last_round, quorum_at, last_arrival, due, participants
            at = due if due > last_arrival else last_arrival  # the members' bodies are in (within the hold)
            version += 1
            last_round = round_
            merge_times.append(at)
            merge_tokens.append(sum(members.values()) * tokens_per_step)
            participants += len(members)
            back = at + down
            for j in members:
                if waiting[j] == version:
                    receive(j, back, version)
            members.clear()
            quorum_at, last_arrival, due = None, 0.0, inf

        for i, s, header, arr, inc, inc_start, r in rows:
            if due < header:  # the next header comes after the merge time: it missed the round
                close()
            if inc_of[i] != inc:  # a (re)joined learner fetches the current version
                inc_of[i] = inc
                if not outages[i].elastic:
                    up_lo[i], up_hi[i], up_down[i] = -inf, inf, inc_start
                ref[i], base[i], answered[i], waiting[i], synced[i] = 0, version, 0.0, -1, 0
            elif answered[i] >= s:
                # The previous sync of this fragment is unanswered (LearnerBook.on_step runs before ready() at a
                # step boundary, so one answered at this very step still counts as in flight): skip, counters carry on.
                skipped += 1
                continue
            synced[i] = s
            late = r <= last_round
            if late and not carry:
                reason = late_reason  # its round has merged: it misses that merge
            elif version - base[i] > max_staleness:
                reason = stale_reason
            else:
                reason = ""
            if reason:
                refused += 1
                late_refused += reason == late_reason
            else:
                target = r if r > last_round else last_round + 1  # a late upload is carried into the next round
                if target > round_:  # a new round, or one short of quorum carrying its contributions on into it
                    round_, opened = target, round_opens(fragment_schedule, p, target) * pace
                carried += late
                members[i] = s - ref[i] if s > ref[i] else 0
                if arr > last_arrival:
                    last_arrival = arr
                if quorum_at is None and len(members) >= k_min:
                    quorum_at = arr
                    q = max(arr - opened, 0.0)
                    # An EMA of an unchanged sample is unchanged: skip the work.
                    if timing.t_quorum.value != q:
                        timing = timing.observe_quorum(q)
                        grace = grace_seconds(policy, timing)
                if quorum_at is not None:
                    if not active_lo <= last_arrival < active_hi:
                        active_lo, active_hi, active = active_span(last_arrival)
                    due = merge_time_with_grace(grace, quorum_at, len(members), active, opened)
            behind = base[i] - version
            if behind == 0 and not reason:  # the usual case, asked once
                want = want_current
            else:
                key = (reason, behind)
                asked = wants.get(key)
                if asked is None:  # upload_outcome's want moves with the versions: ask it once
                    asked = wants[key] = upload_outcome(not reason, reason, behind, 0).want
                    assert asked is not None
                want = asked
            want += version
            if want <= version:
                # What it asked for exists: the reply brings it. A refused sync is failed, so no overlap wait.
                receive(i, arr + down, version, not reason)
            else:
                answered[i], waiting[i] = inf, want
        if due < horizon:
            close()
        return FragmentRounds(merge_times, merge_tokens, participants, skipped, refused, late_refused, carried)


def _rounds_of(syncer: _Syncer, ups: Uploads, horizon: float, p: int) -> FragmentRounds:
    """Fragment ``p``'s rounds: its uploads handed to the syncer in header order."""
    f = ups.fragment(p)
    sel = np.argsort(f.header, kind="stable")
    return syncer.fragment(
        p,
        zip(
            f.learner[sel].tolist(),
            f.step[sel].tolist(),
            f.header[sel].tolist(),
            f.arrival[sel].tolist(),
            f.incarnation[sel].tolist(),
            f.inc_start[sel].tolist(),
            f.round[sel].tolist(),
        ),
        horizon,
    )


# What forked workers simulate: set before the fork and inherited (the uploads are hundreds of MB: never pickled).
_FORKED: tuple[_Syncer, Uploads, float] | None = None


def _forked_rounds(p: int) -> FragmentRounds:
    assert _FORKED is not None, "a fragment worker runs only in a process forked by each_fragment"
    return _rounds_of(*_FORKED, p)


def _may_fork() -> bool:
    """Whether this process may fork workers: a lock another thread holds at the fork stays held in the child
    forever, so not while other Python threads run, nor once JAX or gRPC are loaded (their C++ threads; the
    ``diloco-chaos simulate --scale`` process loads neither)."""
    return threading.active_count() == 1 and not ({"jax", "grpc"} & sys.modules.keys())


def _worker_ignores_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends the pool


def each_fragment(
    syncer: _Syncer,
    ups: Uploads,
    horizon: float,
    workers: int,
    progress: Callable[[float], None] | None = None,
) -> list[FragmentRounds]:
    """Every fragment's rounds, in fragment order: one after another, or on ``workers`` forked processes at once
    (the same results: fragments share nothing, :class:`_Syncer`), where :func:`_may_fork`; otherwise here, one
    after another. Whatever ends the run — an error in a worker, Ctrl-C — ends the workers with it."""
    global _FORKED
    nfrag = syncer.fragment_schedule.num_fragments
    workers = min(workers, nfrag)
    out: list[FragmentRounds] = []

    def done(r: FragmentRounds) -> None:
        out.append(r)
        if progress is not None:
            progress(len(out) / nfrag)

    if workers <= 1 or not _may_fork():
        for p in range(nfrag):
            done(_rounds_of(syncer, ups, horizon, p))
        return out
    _FORKED = (syncer, ups, horizon)
    try:
        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_ignores_sigint) as pool:
            for r in pool.imap(_forked_rounds, range(nfrag)):
                done(r)
            pool.close()
            pool.join()
    finally:
        _FORKED = None
    return out


def syncer_and_uploads(cfg: ScaleConfig, outages: list[Outages]) -> tuple[_Syncer, Uploads]:
    """The syncer of the plan (its timing at the start: the cluster's pace and one upload's time) and every
    learner's uploads."""
    a = cfg.algorithm
    fragment_schedule = a.fragment_schedule()
    comm = comm_times(cfg)
    up, down = comm.fragment_up_s, comm.fragment_down_s
    pace = cluster_pace([cfg.step_s(i) for i in range(a.num_learners)])  # the lower median of the step times
    assert pace is not None
    ups = learner_uploads(cfg, outages, fragment_schedule, up, down, pace)
    timing = Timing(t_step=Ema(value=pace)).observe_upload(up)
    return _Syncer(cfg, outages, down, timing, fragment_schedule, pace), ups


def run(
    cfg: ScaleConfig,
    outages: list[Outages],
    timeline: Timeline | None = None,
    progress: Callable[[float], None] | None = None,
    workers: int = 1,
) -> Trace:
    a, w = cfg.algorithm, cfg.workload
    m, nfrag = a.num_learners, a.num_fragments
    comm = comm_times(cfg)
    tokens_per_learner_step = w.tokens_per_step / m
    horizon = float(cfg.duration)
    syncer, ups = syncer_and_uploads(cfg, outages)
    steps_s = syncer.steps_s
    rounds = each_fragment(syncer, ups, horizon, workers, progress)
    merge_times = [t for r in rounds for t in r.merge_times]
    merge_tokens = [x for r in rounds for x in r.merge_tokens]
    participants, skipped = sum(r.participants for r in rounds), sum(r.skipped for r in rounds)
    refused, late = sum(r.refused for r in rounds), sum(r.late for r in rounds)
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

    return Trace(
        np.asarray(merge_times),
        np.asarray(merge_tokens),
        trained_at=trained_at,
        useful_at=useful_at,
        failure_times=np.concatenate([o.failure_times for o in outages]),
        timeline=timeline,
        details={
            "uploads": float(len(ups)),
            "skipped_syncs": float(skipped + ups.link_skipped),
            "refused_stale": float(refused - late),
            "refused_late": float(late),
            "late_carried": float(sum(r.carried for r in rounds)),
            "merges": float(n_merges),
            "participants_per_merge": participants / n_merges if n_merges else 0.0,
            "fragment_round_trip_s": comm.fragment_round_trip_s,
            "fragment_period_s": a.sync_every * w.step_s / nfrag,
        },
    )
