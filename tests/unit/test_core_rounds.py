"""Rounds on the syncer's step clock (``rounds="clock"``): the pure core, no I/O, time as plain floats.

One fragment, H = 4, P = 1: round r opens at cluster step 4 + 4r. A report with a step time of 0.25 s
at t = 0 starts the clock, so round r opens at t = 1 + r.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.support import syncer_policy
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.fragments import partition_tensors
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.replies import upload_outcome
from trainer.core.rounds import StepClock, cluster_pace, round_at, sync_step
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState

IDS = ("a", "b", "c")


def clocked(
    min_quorum: int = 1,
    late: str = "refuse",
    grace: bool = True,
    momentum: float = 0.9,
    num_learners: int = 3,
    grace_waits_for: str = "active",
) -> SyncerState:
    policy = syncer_policy(
        num_learners=num_learners,
        min_quorum=min_quorum,
        grace=grace,
        grace_cap_steps=2.0,
        outer_lr=0.7,
        outer_momentum=momentum,
        sync_every=4,
        late_uploads=late,
        max_staleness=3,
        rounds="clock",
        grace_waits_for=grace_waits_for,
        heard_within_s=1.5,
    )
    st = SyncerState.create(policy, partition_tensors({"w": 2}, 1), {"w": np.zeros(2, np.float32)})
    for lid in IDS[:num_learners]:
        st.join(lid, "i", now=0.0)
        st.report(lid, "i", step=2, tokens=128, step_time_s=0.25, now=0.0)
    return st


def up(lid: str, r: int, base: int = 0, value: float = -1.0, steps: int = 4) -> Contribution:
    return Contribution(lid, "i", 0, base, {"w": np.full(2, value, np.float32)}, steps, 64 * steps, round=r)


def merge_due(st: SyncerState, now: float) -> list:
    return [st.merge(p, now) for p in st.due_merges(now)]


def opt_leaves(st: SyncerState) -> list[np.ndarray]:
    return [np.array(x) for x in jax.tree_util.tree_leaves(st.opt_states)]


def test_the_clock_runs_at_the_lower_median_pace_and_opens_rounds_on_schedule() -> None:
    st = clocked()
    assert st.clock.pace_s == 0.25 and st.cluster_step(now=1.0) == pytest.approx(4.0)
    assert [st.current_round(0, t) for t in (0.9, 1.0, 1.99, 2.0)] == [-1, 0, 0, 1]
    # Two slow learners of three set the pace; one fast liar among three cannot.
    st.report("a", "i", step=3, tokens=192, step_time_s=1e-6, now=2.0)
    assert st.clock.pace_s == 0.25
    st.report("b", "i", step=3, tokens=192, step_time_s=0.5, now=2.0)
    st.report("c", "i", step=3, tokens=192, step_time_s=0.5, now=2.0)
    assert st.clock.pace_s == 0.5 and st.cluster_step(now=3.0) == pytest.approx(8.0 + 2.0)  # continuous at t = 2
    assert cluster_pace([0.1, 0.2, float("nan"), 0.0, -1.0]) == 0.1


def test_one_merge_per_round_over_every_contribution_that_arrived() -> None:
    st = clocked()
    assert st.submit(up("a", 0), now=1.01).accepted
    assert st.due_merges(now=1.02) == []  # the grace window waits for the others
    st.submit(up("b", 0), now=1.05)
    st.submit(up("c", 0), now=1.08)
    (rec,) = merge_due(st, now=1.08)  # everyone active is in: no reason to wait longer
    assert (rec.round, rec.version, len(rec.participants)) == (0, 1, 3)
    assert st.rounds == {} and st.last_round == [0]


def test_an_upload_for_a_merged_round_is_refused_and_changes_nothing() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    merge_due(st, now=1.01)
    before = (st.params["w"].copy(), list(st.versions), opt_leaves(st), st.merges_total)
    with pytest.raises(Rejected) as err:
        st.submit(up("b", 0), now=1.2)
    assert err.value.reason is RejectReason.LATE_ROUND and "has merged" in err.value.detail
    assert st.rounds == {}  # a late upload never opens a round
    after = (st.params["w"], list(st.versions), opt_leaves(st), st.merges_total)
    assert np.array_equal(before[0], after[0]) and before[1:2] == after[1:2] and before[3] == after[3]
    assert all(np.array_equal(x, y) for x, y in zip(before[2], after[2]))
    # The learner catches up with the merge it missed.
    assert upload_outcome(False, RejectReason.LATE_ROUND.value, 0, st.versions[0]).want == 1


def test_a_carried_late_upload_waits_for_the_next_rounds_opening() -> None:
    st = clocked(grace=False, late="carry")
    st.submit(up("a", 0), now=1.01)
    merge_due(st, now=1.01)
    res = st.submit(up("b", 0), now=1.2)
    assert res.accepted and res.late and st.rounds[0].round == 1
    assert st.due_merges(now=1.5) == []  # carried into round 1, which opens at t = 2: no round of its own
    (rec,) = merge_due(st, now=2.0)
    assert (rec.round, rec.late, rec.version) == (1, 1, 2) and st.late_carried == 1


def announce(st: SyncerState, c: Contribution, now: float) -> None:
    """The upload's header arrives (the gRPC service calls this before reading the body)."""
    specs = {n: (tuple(t.shape), str(t.dtype)) for n, t in c.tensors.items()}
    st.announce(
        c.learner_id, c.incarnation, c.fragment, c.base_version, specs, c.c_steps, c.c_tokens, now, c.round
    )


def test_an_upload_whose_header_made_the_round_is_merged_in_it_though_its_body_is_slow() -> None:
    # K = 1 without grace: round 0 (opens at t = 1) merges at a's arrival. b's header came before that, its
    # body 0.1 s later (a slow link, a busy machine): the paper takes the fragment from the learners that made it.
    st = clocked(grace=False)
    announce(st, up("b", 0), now=1.005)
    st.submit(up("a", 0), now=1.01)
    assert st.due_merges(now=1.05) == [] and st.next_deadline(now=1.05) == pytest.approx(1.005 + st.hold_s)
    st.submit(up("b", 0), now=1.1)
    (rec,) = merge_due(st, now=1.1)  # every body it waited for is in: at once
    assert sorted(p.learner_id for p in rec.participants) == ["a", "b"]
    assert (rec.held, rec.held_s) == (1, pytest.approx(0.09))
    assert st.announced == {}
    # Negative control: without the header, b's body misses the round.
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    (rec,) = merge_due(st, now=1.01)
    with pytest.raises(Rejected) as err:
        st.submit(up("b", 0), now=1.1)
    assert len(rec.participants) == 1 and err.value.reason is RejectReason.LATE_ROUND


def test_a_header_then_silence_costs_its_round_one_hold_and_no_more() -> None:
    st = clocked(grace=False)
    assert st.hold_s == pytest.approx(0.25)  # no upload measured yet: one step of the cluster's pace
    announce(st, up("b", 0), now=1.005)
    st.submit(up("a", 0), now=1.01)
    assert st.due_merges(now=1.25) == []
    (rec,) = merge_due(st, now=1.005 + st.hold_s)
    assert [p.learner_id for p in rec.participants] == ["a"] and st.announced == {}  # the merge forgets it
    with pytest.raises(Rejected) as err:  # its body, if it ever comes, is late
        st.submit(up("b", 0), now=1.4)
    assert err.value.reason is RejectReason.LATE_ROUND
    # The next round is not held by it: nothing of b is in flight any more.
    st.submit(up("a", 1, base=1), now=2.01)
    assert [r.round for r in merge_due(st, now=2.01)] == [1]


def test_a_header_after_the_merge_time_or_withdrawn_holds_nothing() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    announce(st, up("b", 0), now=1.02)  # after the round's merge time (1.01): it did not make it
    assert [r.round for r in merge_due(st, now=1.02)] == [0]
    st = clocked(grace=False)
    announce(st, up("b", 0), now=1.005)
    st.withdraw(up("b", 0).key)  # its call failed: the shell says so
    st.submit(up("a", 0), now=1.01)
    assert [len(r.participants) for r in merge_due(st, now=1.01)] == [1]
    # A header for the next round does not hold this one.
    st = clocked(grace=False)
    announce(st, up("b", 1), now=1.005)
    st.submit(up("a", 0), now=1.01)
    assert [r.round for r in merge_due(st, now=1.01)] == [0] and list(st.announced) == [up("b", 1).key]


def test_a_refused_header_is_not_announced() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    merge_due(st, now=1.01)
    with pytest.raises(Rejected):
        announce(st, up("b", 0), now=1.02)  # its round has merged
    assert st.announced == {}


def test_an_empty_round_takes_no_step_and_leaves_the_momentum_alone() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    merge_due(st, now=1.01)
    before = (st.params["w"].copy(), opt_leaves(st))
    for t in (2.0, 3.0, 4.0, 5.5):  # rounds 1..4 open with nobody uploading
        assert merge_due(st, now=t) == []
    assert np.array_equal(st.params["w"], before[0]) and st.versions == [1]
    assert all(np.array_equal(x, y) for x, y in zip(before[1], opt_leaves(st)))
    # The next contribution (round 5) is anchored at the current value and merges as one step.
    st.submit(up("a", 5, base=1), now=6.01)
    (rec,) = merge_due(st, now=6.01)
    assert rec.round == 5 and rec.version == 2


def test_no_round_merges_before_it_opens() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 1), now=1.9)  # the learner's clock runs a little ahead: round 1 opens at t = 2
    assert st.due_merges(now=1.95) == [] and st.next_deadline(now=1.95) == pytest.approx(2.0)
    assert [r.round for r in merge_due(st, now=2.0)] == [1]


def test_an_upload_for_a_round_the_clock_has_not_opened_is_refused() -> None:
    st = clocked()
    with pytest.raises(Rejected) as err:
        st.submit(up("a", 3), now=1.5)  # in round 0; round 1 would be one ahead, 3 is not
    assert err.value.reason is RejectReason.FUTURE_ROUND and st.rounds == {}
    with pytest.raises(Rejected):
        st.submit(up("a", -1), now=1.5)


def test_contributions_are_anchored_at_the_value_their_round_started_from() -> None:
    st = clocked(grace=False, momentum=0.0)
    # lr 0.7: a lone contribution moves the fragment 0.7 of the way to the learner's parameters.
    st.submit(up("a", 0, base=0, value=-1.0), now=1.01)
    merge_due(st, now=1.01)
    assert st.params["w"].tolist() == pytest.approx([0.7, 0.7])
    # b still holds version 0; its parameters are at w = 1 (outer gradient -1 against version 0). Anchored at
    # round 1's start (0.7) its outer gradient is 0.7 - 1 = -0.3, not the -1 it uploaded.
    st.submit(up("b", 1, base=0, value=-1.0), now=2.01)
    merge_due(st, now=2.01)
    assert st.params["w"].tolist() == pytest.approx([0.7 + 0.7 * 0.3] * 2)


def test_a_round_below_quorum_carries_its_contributions_into_the_next_round() -> None:
    st = clocked(min_quorum=2, grace=False)
    st.submit(up("a", 0), now=1.01)
    assert merge_due(st, now=1.5) == []  # one of K = 2
    st.submit(up("b", 1, steps=8), now=2.01)  # the next round opens; a's contribution is still there
    (rec,) = merge_due(st, now=2.01)
    assert rec.round == 1 and sorted(p.learner_id for p in rec.participants) == ["a", "b"]
    # A learner's newer contribution replaces its older one in the pending round.
    st.submit(up("a", 2, base=1, value=-1.0), now=3.01)
    st.submit(up("a", 3, base=1, value=-2.0, steps=8), now=4.01)
    assert list(st.rounds[0].contributions) == ["a"] and st.rounds[0].contributions["a"].round == 3


def test_an_on_time_upload_is_in_the_merge_its_learner_waits_for() -> None:
    # a holds version 0 while the fragment is at 1 (it has not applied round 0's result yet). Asking for
    # base + 1 would take round 0's merge, which lacks its upload; it waits for current + 1 = round 1's.
    st = clocked(grace=False)
    st.submit(up("b", 0), now=1.01)
    merge_due(st, now=1.01)
    res = st.submit(up("a", 1, base=0), now=2.01)
    want = upload_outcome(res.accepted, "", 0, res.current_version).want
    (rec,) = merge_due(st, now=2.01)
    assert want == rec.version == 2 and "a" in [p.learner_id for p in rec.participants]


def test_token_weights_follow_the_steps_each_learner_covered() -> None:
    st = clocked()
    st.submit(up("a", 0, steps=4), now=1.0)
    st.submit(up("b", 0, steps=4), now=1.0)
    st.submit(up("c", 0, steps=2), now=1.1)  # a learner at half speed covers half the steps of a round
    (rec,) = merge_due(st, now=1.1)
    weights = {p.learner_id: p.weight for p in rec.participants}
    assert weights["c"] == pytest.approx(0.2) and weights["a"] == pytest.approx(0.4)


def test_the_clock_and_merged_rounds_survive_a_restore() -> None:
    st = clocked(grace=False)
    st.submit(up("a", 0), now=1.01)
    merge_due(st, now=1.01)
    arrays, meta = st.to_checkpoint()
    back = SyncerState.from_checkpoint(st.policy, st.fragments, arrays, meta, version_skip=2)
    assert back.last_round == [0] and back.cluster_step(now=3.0) == pytest.approx(st.cluster_step(now=3.0))
    back.join("a", "i2", now=3.0)
    with pytest.raises(Rejected) as err:  # a merged round stays merged
        back.submit(Contribution("a", "i2", 0, 3, {"w": np.zeros(2, np.float32)}, 4, 256, round=0), now=3.0)
    assert err.value.reason is RejectReason.LATE_ROUND


def _clocked_syncs(step_s: float, until: float, phase: float = 0.0) -> list[tuple[float, SyncStart]]:
    """(time, sync) of a learner stepping every ``step_s`` from ``phase`` on a clock whose round r of its one
    fragment opens at t = 1 + r, answers never coming back (its counters carry on)."""
    sched = FragmentSchedule(1, 4, 1, staggered=True)
    clock = StepClock(0.0, 0.0, 0.25)
    book = LearnerBook(sched, [0], blocking=False, clocked=True)
    out = []
    for k in range(1, int(until / step_s) + 1):
        t = phase + k * step_s
        out += [(t, s) for s in book.on_step(k, 64, sync_step(clock, t, step_s))]
        book.sync_failed(0, 0)  # not waiting for answers here
    return out


@pytest.mark.parametrize("step_s", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("phase", [0.0, 0.01, 0.1, 0.24])
def test_a_learner_syncs_at_its_last_boundary_at_or_before_each_opening(step_s: float, phase: float) -> None:
    """Whatever its speed and phase, a learner's sync for a round starts within its own step before the opening,
    never after it: its upload is at the syncer when the round opens (at the boundary nearest the opening, a slow
    learner's upload came up to half its step late and often missed the grace window)."""
    synced = {s.round: t for t, s in _clocked_syncs(step_s, 6.0, phase)}
    assert sorted(synced) == list(range(len(synced))) and len(synced) >= 4
    for r, t in synced.items():
        assert 1 + r - step_s < t <= 1 + r + 1e-9, (r, t)


def test_learners_of_different_speeds_sync_on_one_schedule() -> None:
    starts = {
        name: [(s.round, s.c_steps) for _, s in _clocked_syncs(step_s, 4.0)]
        for name, step_s in (("fast", 0.25), ("slow", 0.5))
    }
    # Both sync rounds 0..3; the slow learner covers half the steps (its counters carry on: never received).
    assert [r for r, _ in starts["fast"]] == [r for r, _ in starts["slow"]] == [0, 1, 2, 3]
    assert starts["fast"][-1][1] == 2 * starts["slow"][-1][1]


def test_a_joining_learner_starts_at_the_next_round_and_syncs_once_for_rounds_it_slept_through() -> None:
    sched = FragmentSchedule(1, 4, 1, staggered=True)
    book = LearnerBook(sched, [0], blocking=False, clocked=True, start_step=9.0)  # round 1 is open
    assert round_at(sched, 0, 9.0) == 1 and book.on_step(1, 64, 10.0) == []
    assert [s.round for s in book.on_step(2, 64, 12.0)] == [2]
    book.sync_failed(0, 0)
    assert [s.round for s in book.on_step(3, 64, 25.0)] == [5]  # paused through rounds 3..5: one sync, for 5
    with pytest.raises(ValueError, match="cluster step"):
        book.on_step(4, 64)


def _c_falls_silent(waits_for: str, c_reports_at: float | None = None) -> tuple[SyncerState, list]:
    """Rounds 0 and 1 (open at t = 1, 2) merge everyone; then c goes quiet (no upload, no report after t = 2.0,
    unless ``c_reports_at``). Round 2 opens at t = 3 with a and b in: what is due then?"""
    st = clocked(grace_waits_for=waits_for)
    for r, t in ((0, 1.0), (1, 2.0)):
        for lid in IDS:
            st.submit(up(lid, r, base=st.versions[0]), now=t)
        merge_due(st, now=t)
    if c_reports_at is not None:
        st.report("c", "i", step=10, tokens=640, step_time_s=0.25, now=c_reports_at)
    st.submit(up("a", 2, base=st.versions[0]), now=3.6)
    st.submit(up("b", 2, base=st.versions[0]), now=3.6)
    return st, merge_due(st, now=3.6)


def test_grace_waits_for_heard_does_not_wait_for_a_learner_gone_silent() -> None:
    st, due = _c_falls_silent("heard")  # c last heard 1.6 s before: more than three report intervals
    assert [r.round for r in due] == [2] and len(due[0].participants) == 2
    assert due[0].decision is not None and due[0].decision[3] == 2  # it waited for a and b only


def test_grace_waits_for_active_waits_for_the_silent_learner_as_the_paper_does() -> None:
    """The negative control of the test above: within the liveness timeout c is waited for."""
    st, due = _c_falls_silent("active")
    assert due == [] and st.due_merges(now=3.6 + 1.0) == [0]


def test_grace_waits_for_heard_still_waits_for_a_slow_learner_that_reports() -> None:
    st, due = _c_falls_silent("heard", c_reports_at=3.5)
    assert due == []
    (rec,) = merge_due(st, now=4.6)
    assert rec.decision is not None and rec.decision[3] == 3
