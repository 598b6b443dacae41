"""Unit tests for trainer.core.syncer_state (the syncer state machine).

Time is a fake clock: plain floats passed as ``now``. Contributions carry the
learner's OUTER GRADIENT (global - local), not its parameters. These tests
drive the rules every round mode shares (versions, quorum, grace, checkpoints,
validation) with ``rounds="arrival"``, where no step clock is needed; the
scheduled rounds of ``rounds="clock"`` have their own tests
(``test_core_rounds.py``).
"""

from __future__ import annotations

import copy
import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import syncer_policy
from trainer.checkpoint import load_latest, save_checkpoint
from trainer.core import claims
from trainer.core.fragments import partition_tensors
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_policy import STEP_SLACK
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState

SIZES = {"w": 4}


def make_state(num_learners=3, min_quorum=1, sizes=None, num_fragments=1, params=None, **policy_kw) -> SyncerState:
    sizes = dict(SIZES if sizes is None else sizes)
    policy_kw.setdefault("rounds", "arrival")
    policy = syncer_policy(num_fragments, num_learners=num_learners, min_quorum=min_quorum, **policy_kw)
    frags = partition_tensors(sizes, num_fragments)
    if params is None:
        params = {n: np.zeros(s, np.float32) for n, s in sizes.items()}
    return SyncerState.create(policy, frags, params)


def grad(state: SyncerState, fragment: int, value) -> dict[str, np.ndarray]:
    """An outer gradient for every tensor of ``fragment``, filled with ``value``."""
    return {n: np.full(state.params[n].shape, value, np.float32) for n in state.fragments[fragment].names}


def contrib(learner, inc, fragment, base, tensors, c_steps=1, c_tokens=64, upload_seconds=0.0) -> Contribution:
    return Contribution(learner, inc, fragment, base, tensors, c_steps, c_tokens, upload_seconds)


def join_all(state: SyncerState, n: int, now: float = 0.0) -> list[str]:
    ids = [f"L{i}" for i in range(n)]
    for i in ids:
        state.join(i, "inc-1", now=now)
    return ids


def snapshot(state: SyncerState):
    return (
        {n: v.copy() for n, v in state.params.items()},
        list(state.versions),
        [[np.array(x) for x in jax.tree_util.tree_leaves(s)] for s in state.opt_states],
        {p: dict(r.contributions) for p, r in state.rounds.items()},
        state.merges_total,
    )


def assert_same_snapshot(a, b):
    pa, va, oa, ra, ma = a
    pb, vb, ob, rb, mb = b
    assert va == vb
    assert ma == mb
    assert ra.keys() == rb.keys() and all(ra[k].keys() == rb[k].keys() for k in ra)
    for n in pa:
        np.testing.assert_array_equal(pa[n], pb[n])
    for xs, ys in zip(oa, ob):
        for x, y in zip(xs, ys):
            np.testing.assert_array_equal(x, y)


def reason_of(fn) -> RejectReason:
    with pytest.raises(Rejected) as info:
        fn()
    return info.value.reason


# ---- construction --------------------------------------------------------
def test_docstring_example():
    st_ = make_state(num_learners=1, sizes={"w": 2}, outer_lr=1.0, outer_momentum=0.0)
    st_.join("a", "inc-1", now=0.0)
    assert st_.submit(contrib("a", "inc-1", 0, 0, {"w": -np.ones(2, np.float32)}), now=1.0).accepted
    assert st_.due_merges(now=1.0) == [0]
    st_.merge(0, now=1.0)
    assert st_.versions == [1]
    np.testing.assert_allclose(st_.params["w"], [1.0, 1.0], rtol=1e-6)


def test_create_copies_params_and_checks_coverage():
    params = {"w": np.zeros(4, np.float32)}
    s = SyncerState.create(syncer_policy(num_learners=1, min_quorum=1), partition_tensors({"w": 4}, 1), params)
    s.params["w"][0] = 5.0
    assert params["w"][0] == 0.0
    with pytest.raises(ValueError, match="differently"):
        SyncerState.create(
            syncer_policy(num_learners=1, min_quorum=1),
            partition_tensors({"w": 4}, 1),
            {"w": np.zeros(4, np.float32), "extra": np.zeros(1, np.float32)},
        )
    with pytest.raises(ValueError, match="min_quorum"):
        make_state(num_learners=2, min_quorum=3)


# ---- membership -----------------------------------------------------------
def test_join_and_rejoin_incarnations():
    s = make_state()
    r1 = s.join("a", "inc-1", now=0.0)
    assert (r1.incarnation_index, r1.rejoined) == (0, False)
    assert r1.versions == (0,)
    again = s.join("a", "inc-1", now=1.0)  # same process again: idempotent
    assert again.incarnation_index == 0
    assert s.incarnation_counts["a"] == 1
    assert s.learners["a"].last_seen == 1.0
    r2 = s.join("a", "inc-2", now=2.0)  # a restart: new incarnation
    assert (r2.incarnation_index, r2.rejoined) == (1, True)
    r3 = s.join("a", "inc-3", now=3.0)
    assert r3.incarnation_index == 2
    assert s.learners["a"].incarnation == "inc-3"
    assert s.join("b", "inc-1", now=3.0).incarnation_index == 0  # indices are per learner


def test_join_with_empty_ids_is_malformed():
    s = make_state()
    assert reason_of(lambda: s.join("", "inc", now=0.0)) is RejectReason.MALFORMED
    assert reason_of(lambda: s.join("a", "", now=0.0)) is RejectReason.MALFORMED


def test_unknown_learner_is_rejected():
    s = make_state()
    assert (
        reason_of(lambda: s.submit(contrib("ghost", "inc-1", 0, 0, grad(s, 0, 1.0)), now=0.0))
        is RejectReason.UNKNOWN_LEARNER
    )
    assert reason_of(lambda: s.report("ghost", "inc-1", 1, 10, 0.1, now=0.0)) is RejectReason.UNKNOWN_LEARNER


def test_stale_incarnation_is_rejected():
    s = make_state()
    s.join("a", "inc-1", now=0.0)
    s.join("a", "inc-2", now=1.0)
    assert (
        reason_of(lambda: s.submit(contrib("a", "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0))
        is RejectReason.STALE_INCARNATION
    )
    assert reason_of(lambda: s.report("a", "inc-1", 1, 10, 0.1, now=1.0)) is RejectReason.STALE_INCARNATION
    assert s.submit(contrib("a", "inc-2", 0, 0, grad(s, 0, 1.0)), now=1.0).accepted


def test_left_learner_is_rejected_until_it_joins_again():
    s = make_state()
    s.join("a", "inc-1", now=0.0)
    s.leave("a", "inc-1", now=1.0)
    assert (
        reason_of(lambda: s.submit(contrib("a", "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0))
        is RejectReason.LEFT_LEARNER
    )
    assert s.active_learners(now=1.0) == []
    r = s.join("a", "inc-2", now=2.0)
    assert r.incarnation_index == 1
    assert s.submit(contrib("a", "inc-2", 0, 0, grad(s, 0, 1.0)), now=2.0).accepted


def test_active_learners_follow_the_liveness_timeout():
    s = make_state(liveness_timeout_s=5.0)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=3.0)
    assert {r.learner_id for r in s.active_learners(now=5.0)} == {"a", "b"}
    assert {r.learner_id for r in s.active_learners(now=6.0)} == {"b"}
    s.report("a", "i", 1, 1, 0.0, now=7.0)  # any call refreshes last_seen
    assert {r.learner_id for r in s.active_learners(now=8.5)} == {"a"}


def _announce(s: SyncerState, lid: str, now: float, fragment: int = 0) -> tuple[str, str, int, int, int]:
    tensors = grad(s, fragment, 0.1)
    specs = {n: (tuple(t.shape), str(t.dtype)) for n, t in tensors.items()}
    s.announce(lid, "i", fragment, s.versions[fragment], specs, 1, 64, now)
    return (lid, "i", fragment, s.versions[fragment], 0)


def test_an_upload_still_coming_keeps_its_learner_active_and_a_round_waits_its_grace_for_it():
    # Over a slow link a body takes longer than the liveness timeout, its learner's reports queued behind it on the
    # same connection: the bytes arriving are the only word from it. Taken for dead, every round merged at the
    # first upload and the others were refused as late (small preset over 500 KB/s links: 2.2% worse loss).
    s = make_state(num_learners=2, liveness_timeout_s=5.0, grace=True, grace_gamma=0.5, overlap_steps=2)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    _merge_all(s, {"a": "i", "b": "i"}, now=0.5)
    assert s.awaited(0.5) == []
    key = _announce(s, "b", now=1.0)
    for t in (3.0, 5.0, 7.0):
        s.hear_body(key, now=t)
    for t in (4.0, 7.5):
        s.report("a", "i", 1, 64, 0.5, now=t)
    assert {r.learner_id for r in s.active_learners(now=8.0)} == {"a", "b"}
    s.submit(contrib("a", "i", 0, 1, grad(s, 0, 0.1)), now=8.0)
    assert s.due_merges(now=8.0) == []  # one of two in: the round waits (its grace window) for b
    assert s.submit(contrib("b", "i", 0, 1, grad(s, 0, 0.1)), now=8.2).accepted
    assert s.due_merges(now=8.2) == [0] and s.learners["b"].bodies == {} and s.learners["b"].last_seen == 8.2
    assert s.awaited(8.2) == []  # b was never away (silent 7.7 s but for its body): settle need not wait for it


def test_an_upload_that_ends_refused_or_cut_is_no_sign_of_life():
    s = make_state(num_learners=2, liveness_timeout_s=5.0)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    key = _announce(s, "b", now=4.0)
    s.hear_body(key, now=6.0)
    assert [r.learner_id for r in s.active_learners(now=9.0)] == ["b"]
    assert s.withdraw(key) == 6.0  # the shell: the body never came whole, or was refused
    assert s.active_learners(now=9.0) == [] and s.learners["b"].heard_at() == 0.0
    s.hear_body(key, now=9.5)  # a late piece of a withdrawn body counts for nothing
    assert s.active_learners(now=9.5) == []


# ---- version rules ----------------------------------------------------------
def _advance(s: SyncerState, learner: str, merges: int, now: float) -> None:
    for _ in range(merges):
        base = s.versions[0]
        s.submit(contrib(learner, "inc-1", 0, base, grad(s, 0, 0.1)), now=now)
        assert s.due_merges(now) == [0]
        s.merge(0, now=now)


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_version_window(max_staleness):
    s = make_state(num_learners=2, min_quorum=1, max_staleness=max_staleness, outer_momentum=0.0)
    s.join("a", "inc-1", now=0.0)
    s.join("b", "inc-1", now=0.0)
    _advance(s, "a", 4, now=0.0)
    current = s.versions[0]
    assert current == 4
    for base in range(current - max_staleness, current + 1):
        fresh = make_copy(s)
        assert fresh.check_header("b", "inc-1", 0, base, {"w": ((4,), "float32")}, 1, 1, now=0.0) == current
        assert fresh.submit(contrib("b", "inc-1", 0, base, grad(s, 0, 1.0)), now=0.0).accepted
    too_old = current - max_staleness - 1
    assert (
        reason_of(lambda: s.submit(contrib("b", "inc-1", 0, too_old, grad(s, 0, 1.0)), now=0.0))
        is RejectReason.STALE_VERSION
    )
    assert (
        reason_of(lambda: s.submit(contrib("b", "inc-1", 0, current + 1, grad(s, 0, 1.0)), now=0.0))
        is RejectReason.FUTURE_VERSION
    )


def make_copy(s: SyncerState) -> SyncerState:
    return copy.deepcopy(s)


def test_unknown_fragment_is_rejected():
    s = make_state()
    s.join("a", "i", now=0.0)
    assert (
        reason_of(lambda: s.check_header("a", "i", 1, 0, {"w": ((4,), "float32")}, 1, 1, now=0.0))
        is RejectReason.UNKNOWN_FRAGMENT
    )
    assert (
        reason_of(lambda: s.check_header("a", "i", -1, 0, {"w": ((4,), "float32")}, 1, 1, now=0.0))
        is RejectReason.UNKNOWN_FRAGMENT
    )


def test_negative_counters_are_rejected():
    s = make_state()
    s.join("a", "i", now=0.0)
    assert (
        reason_of(lambda: s.submit(contrib("a", "i", 0, 0, grad(s, 0, 1.0), c_steps=-1), now=0.0))
        is RejectReason.BAD_COUNTERS
    )
    assert reason_of(lambda: s.report("a", "i", -1, 0, 0.1, now=0.0)) is RejectReason.BAD_COUNTERS
    assert reason_of(lambda: s.report("a", "i", 1, 0, float("nan"), now=0.0)) is RejectReason.BAD_COUNTERS


# ---- duplicates ---------------------------------------------------------------
def test_duplicate_upload_is_acknowledged_and_not_counted_twice():
    s = make_state(num_learners=2, min_quorum=2, merge_rule="mean", outer_lr=1.0, outer_momentum=0.0)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    first = s.submit(contrib("a", "i", 0, 0, grad(s, 0, 2.0), c_steps=1, c_tokens=10), now=0.0)
    assert first.accepted and not first.duplicate
    # Same key, different payload and counters: must change nothing.
    dup = s.submit(contrib("a", "i", 0, 0, grad(s, 0, 100.0), c_steps=1, c_tokens=1000), now=0.1)
    assert dup.accepted and dup.duplicate
    assert s.due_merges(now=1.0) == []  # a duplicate is not a second learner
    s.submit(contrib("b", "i", 0, 0, grad(s, 0, 4.0), c_steps=1, c_tokens=10), now=0.2)
    rec = s.merge(0, now=0.2)
    assert len(rec.participants) == 2
    # equal weights: mean(2, 4) = 3; theta = 0 - 1 * 3
    np.testing.assert_allclose(s.params["w"], np.full(4, -3.0))


def test_duplicate_after_merge_is_acknowledged_and_opens_no_round():
    s = make_state(num_learners=2, min_quorum=1, outer_momentum=0.0, max_staleness=1)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    s.submit(contrib("a", "i", 0, 0, grad(s, 0, 1.0)), now=0.0)
    s.merge(0, now=0.0)
    before = snapshot(s)
    res = s.submit(contrib("a", "i", 0, 0, grad(s, 0, 1.0)), now=1.0)
    assert res.accepted and res.duplicate and res.current_version == 1
    assert s.rounds == {}
    assert_same_snapshot(before, snapshot(s))


# ---- shape / dtype / names / finiteness ------------------------------------------
def test_wrong_shape_dtype_and_names_are_rejected():
    s = make_state(sizes={"w": 4, "b": 2}, num_fragments=1)
    s.join("a", "i", now=0.0)
    good = {"w": np.zeros(4, np.float32), "b": np.zeros(2, np.float32)}
    assert s.submit(contrib("a", "i", 0, 0, good), now=0.0).accepted
    s.join("c", "i", now=0.0)
    cases = [
        ({"w": np.zeros(5, np.float32), "b": np.zeros(2, np.float32)}, RejectReason.BAD_SHAPE),
        ({"w": np.zeros((4, 1), np.float32), "b": np.zeros(2, np.float32)}, RejectReason.BAD_SHAPE),
        ({"w": np.zeros(4, np.float64), "b": np.zeros(2, np.float32)}, RejectReason.BAD_DTYPE),
        ({"w": np.zeros(4, np.float16), "b": np.zeros(2, np.float32)}, RejectReason.BAD_DTYPE),
        ({"w": np.zeros(4, np.float32)}, RejectReason.BAD_SHAPE),  # a tensor missing
        (
            {"w": np.zeros(4, np.float32), "b": np.zeros(2, np.float32), "x": np.zeros(1, np.float32)},
            RejectReason.BAD_SHAPE,
        ),
        ({"w": np.zeros(4, np.float32), "bias": np.zeros(2, np.float32)}, RejectReason.BAD_SHAPE),  # wrong name
    ]
    for tensors, reason in cases:
        assert reason_of(lambda tensors=tensors: s.submit(contrib("c", "i", 0, 0, tensors), now=0.0)) is reason


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_upload_rejected_when_validating(bad):
    s = make_state(validate_uploads=True)
    s.join("a", "i", now=0.0)
    t = grad(s, 0, 1.0)
    t["w"][2] = bad
    assert reason_of(lambda: s.submit(contrib("a", "i", 0, 0, t), now=0.0)) is RejectReason.NON_FINITE
    assert s.rounds == {}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_upload_accepted_when_not_validating(bad):
    s = make_state(validate_uploads=False)
    s.join("a", "i", now=0.0)
    t = grad(s, 0, 1.0)
    t["w"][0] = bad
    assert s.submit(contrib("a", "i", 0, 0, t), now=0.0).accepted
    assert 0 in s.rounds


def test_rejected_uploads_leave_state_untouched():
    s = make_state(num_learners=3, min_quorum=2, outer_momentum=0.9, max_staleness=0)
    join_all(s, 3)
    s.submit(contrib("L0", "inc-1", 0, 0, grad(s, 0, 1.0)), now=0.0)
    s.submit(contrib("L1", "inc-1", 0, 0, grad(s, 0, 2.0)), now=0.0)
    s.merge(0, now=0.0)
    s.submit(contrib("L0", "inc-1", 0, 1, grad(s, 0, 0.5)), now=0.0)  # an open round
    before = snapshot(s)
    nan = grad(s, 0, 1.0)
    nan["w"][1] = np.nan
    bad = [
        (contrib("L2", "inc-1", 0, 0, grad(s, 0, 1.0)), RejectReason.STALE_VERSION),
        (contrib("L2", "inc-1", 0, 2, grad(s, 0, 1.0)), RejectReason.FUTURE_VERSION),
        (contrib("L2", "inc-1", 0, 1, {"w": np.zeros(3, np.float32)}), RejectReason.BAD_SHAPE),
        (contrib("L2", "inc-1", 0, 1, {"w": np.zeros(4, np.float64)}), RejectReason.BAD_DTYPE),
        (contrib("L2", "inc-1", 0, 1, nan), RejectReason.NON_FINITE),
        (contrib("L2", "inc-1", 5, 1, grad(s, 0, 1.0)), RejectReason.UNKNOWN_FRAGMENT),
        (contrib("zz", "inc-1", 0, 1, grad(s, 0, 1.0)), RejectReason.UNKNOWN_LEARNER),
        (contrib("L2", "old", 0, 1, grad(s, 0, 1.0)), RejectReason.STALE_INCARNATION),
        (contrib("L2", "inc-1", 0, 1, grad(s, 0, 1.0), c_tokens=-5), RejectReason.BAD_COUNTERS),
    ]
    table = {lid: dataclasses.astuple(r) for lid, r in s.learners.items()}
    for c, reason in bad:
        assert reason_of(lambda c=c: s.submit(c, now=5.0)) is reason
        assert_same_snapshot(before, snapshot(s))
        # No sign of life either (found by the generated hostile-protocol suite: a refused upload's header
        # refreshed its learner's liveness).
        assert {lid: dataclasses.astuple(r) for lid, r in s.learners.items()} == table


def test_refused_non_finite_merge_leaves_optimizer_state_untouched():
    # theta - lr * (g + mu * g) with finite theta = -3e38, g = 3e38 overflows float32: merge() refuses it.
    # A refused merge must not leave its outer gradient in the momentum buffer.
    s = make_state(
        num_learners=1,
        min_quorum=1,
        merge_rule="mean",
        outer_lr=0.7,
        outer_momentum=0.9,
        params={"w": np.full(4, -3e38, np.float32)},
    )
    s.join("a", "i", now=0.0)
    s.submit(contrib("a", "i", 0, 0, grad(s, 0, 3e38)), now=0.0)
    before = snapshot(s)
    with pytest.raises(FloatingPointError):
        s.merge(0, now=0.0)
    after = snapshot(s)
    np.testing.assert_array_equal(after[0]["w"], before[0]["w"])
    assert after[1] == before[1] and after[4] == before[4]
    for x, y in zip(before[2][0], after[2][0]):
        np.testing.assert_array_equal(x, y)  # momentum must not have absorbed the refused gradient


# ---- quorum and grace ------------------------------------------------------------
def test_no_merge_due_before_k_distinct_learners():
    s = make_state(num_learners=3, min_quorum=2)
    join_all(s, 3)
    s.submit(contrib("L0", "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0)
    s.submit(contrib("L0", "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.5)  # duplicate
    assert s.due_merges(now=1.0) == []
    assert s.due_merges(now=4.0) == []
    assert s.next_deadline(now=4.0) is None
    s.submit(contrib("L1", "inc-1", 0, 0, grad(s, 0, 1.0)), now=2.0)
    assert s.due_merges(now=2.0) == [0]
    assert s.rounds[0].quorum_at == 2.0


def test_due_at_once_when_all_active_learners_are_in_even_with_grace():
    s = make_state(
        num_learners=3,
        min_quorum=2,
        grace=True,
        grace_gamma=0.5,
        grace_cap_steps=10.0,
        overlap_steps=2,
        liveness_timeout_s=100.0,
    )
    ids = join_all(s, 3)
    s.report("L0", "inc-1", 1, 64, step_time_s=1.0, now=0.5)  # t_step = 1 -> grace 1.0
    s.submit(contrib(ids[0], "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0)
    s.submit(contrib(ids[1], "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0)
    assert s.due_merges(now=1.0) == []  # quorum reached, waiting out the grace
    s.submit(contrib(ids[2], "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.2)
    assert s.due_merges(now=1.2) == [0]


def test_grace_deadline_with_fake_clock():
    s = make_state(
        num_learners=3,
        min_quorum=1,
        grace=True,
        grace_gamma=0.5,
        grace_cap_steps=10.0,
        overlap_steps=2,
        liveness_timeout_s=100.0,
    )
    ids = join_all(s, 3)
    s.report(ids[0], "inc-1", 1, 64, step_time_s=1.0, now=0.0)
    # slack = 2 * 1.0 - (0 + 0) -> grace = 0.5 * 2 = 1.0
    s.submit(contrib(ids[0], "inc-1", 0, 0, grad(s, 0, 1.0)), now=10.0)
    assert s.merge_at(0, now=10.0) == pytest.approx(11.0)
    assert s.next_deadline(now=10.0) == pytest.approx(11.0)
    assert s.due_merges(now=10.0) == []
    assert s.due_merges(now=10.99) == []
    assert s.due_merges(now=11.0) == [0]


def test_without_grace_a_quorum_merges_at_once():
    s = make_state(num_learners=3, min_quorum=1, grace=False, liveness_timeout_s=100.0)
    ids = join_all(s, 3)
    s.report(ids[0], "inc-1", 1, 64, step_time_s=1.0, now=0.0)
    s.submit(contrib(ids[0], "inc-1", 0, 0, grad(s, 0, 1.0)), now=3.0)
    assert s.due_merges(now=3.0) == [0]


def test_timed_out_learners_are_not_waited_for():
    s = make_state(num_learners=3, min_quorum=1, grace=True, grace_cap_steps=10.0, liveness_timeout_s=5.0)
    ids = join_all(s, 3, now=0.0)
    s.report(ids[0], "inc-1", 1, 64, step_time_s=1.0, now=9.0)
    s.submit(contrib(ids[0], "inc-1", 0, 0, grad(s, 0, 1.0)), now=10.0)
    # L1 and L2 were last seen at 0.0: only L0 is active, and it contributed.
    assert s.due_merges(now=10.0) == [0]


# ---- versions and merges -------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.booleans()), min_size=1, max_size=25))
def test_versions_increase_by_exactly_one_per_merge(ops):
    s = make_state(
        num_learners=3,
        min_quorum=2,
        sizes={"a": 3, "b": 2},
        num_fragments=2,
        max_staleness=3,
        liveness_timeout_s=1e9,
    )
    ids = join_all(s, 3)
    now = 0.0
    merges = 0
    for learner, frag, do_merge in ops:
        now += 1.0
        base = s.versions[frag]
        s.submit(contrib(ids[learner], "inc-1", frag, base, grad(s, frag, 0.1)), now=now)
        if do_merge:
            for p in s.due_merges(now):
                before = list(s.versions)
                rec = s.merge(p, now=now)
                merges += 1
                expected = list(before)
                expected[p] += 1
                assert s.versions == expected
                assert rec.version == s.versions[p]
                assert rec.merges_total == merges == s.merges_total
        assert all(v >= 0 for v in s.versions)
    assert sum(s.versions) == s.merges_total


def test_merge_matches_hand_computation_with_token_weights():
    lr = 0.5
    theta0 = np.array([1.0, 2.0, -1.0], np.float32)
    s = make_state(
        num_learners=2,
        min_quorum=2,
        sizes={"w": 3},
        params={"w": theta0},
        merge_rule="mean",
        outer_lr=lr,
        outer_momentum=0.0,
    )
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    va = np.array([1.0, 2.0, 0.0], np.float32)
    vb = np.array([3.0, -1.0, 6.0], np.float32)
    s.submit(contrib("a", "i", 0, 0, {"w": va}, c_steps=2, c_tokens=100), now=1.0)  # w = 100^2 / 2 = 5000
    s.submit(contrib("b", "i", 0, 0, {"w": vb}, c_steps=1, c_tokens=50), now=1.0)  # w = 50^2 / 1 = 2500
    rec = s.merge(0, now=1.0)
    merged = (5000 * va.astype(np.float64) + 2500 * vb) / 7500
    np.testing.assert_allclose(s.params["w"], theta0 - lr * merged, rtol=1e-6)
    assert rec.rule == "mean" and rec.version == 1 and rec.base_version == 0
    weights = {p.learner_id: p.weight for p in rec.participants}
    assert weights == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    assert rec.outer_grad_norm == pytest.approx(float(np.linalg.norm(merged)), rel=1e-6)
    assert s.rounds == {}


def test_embedding_fragment_uses_the_mean_rule():
    s = make_state(
        num_learners=2,
        min_quorum=2,
        sizes={"embed": 2, "w": 2},
        num_fragments=2,
        merge_rule="rda",
        outer_lr=1.0,
        outer_momentum=0.0,
    )
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    frag_of = {n: f.index for f in s.fragments for n in f.names}
    for name in ("embed", "w"):
        p = frag_of[name]
        s.submit(contrib("a", "i", p, 0, {name: np.array([1.0, 0.0], np.float32)}), now=0.0)
        s.submit(contrib("b", "i", p, 0, {name: np.array([0.0, 1.0], np.float32)}), now=0.0)
        rec = s.merge(p, now=0.0)
        assert rec.rule == ("mean" if name == "embed" else "rda")
    np.testing.assert_allclose(s.params["embed"], [-0.5, -0.5], rtol=1e-6)
    np.testing.assert_allclose(s.params["w"], [-np.sqrt(0.5)] * 2, rtol=1e-6)


def test_fragment_value_is_a_copy():
    s = make_state()
    version, value = s.fragment_value(0)
    value["w"][:] = 9.0
    assert version == 0 and np.all(s.params["w"] == 0.0)


# ---- token budget ------------------------------------------------------------------------
def test_token_budget_finishes_the_run():
    s = make_state(num_learners=2, token_budget=100)
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    assert s.report("a", "i", 5, 60, 0.1, now=1.0) is False
    assert s.report("a", "i", 5, 50, 0.1, now=1.0) is False  # tokens per incarnation never go down
    assert s.tokens_total == 60
    assert s.report("b", "i", 3, 40, 0.1, now=2.0) is True
    assert s.stopped
    assert s.report("a", "i", 6, 70, 0.1, now=3.0) is True
    assert reason_of(lambda: s.submit(contrib("a", "i", 0, 0, grad(s, 0, 1.0)), now=3.0)) is RejectReason.FINISHED
    assert (
        reason_of(lambda: s.check_header("b", "i", 0, 0, {"w": ((4,), "float32")}, 1, 1, now=3.0))
        is RejectReason.FINISHED
    )


def test_no_budget_never_finishes():
    s = make_state(token_budget=0)
    s.join("a", "i", now=0.0)
    assert s.report("a", "i", 10**6, 10**12, 0.1, now=0.0) is False


def test_tokens_of_a_restarted_learner_add_up():
    s = make_state(token_budget=100)
    s.join("a", "i1", now=0.0)
    assert s.report("a", "i1", 5, 70, 0.1, now=0.0) is False
    s.join("a", "i2", now=1.0)
    assert s.report("a", "i2", 2, 30, 0.1, now=1.0) is True
    assert s.tokens_total == 100


def test_rounds_opened_before_the_budget_is_reached_are_flushed():
    s = make_state(num_learners=3, min_quorum=3, token_budget=10)
    join_all(s, 3)
    s.submit(contrib("L0", "inc-1", 0, 0, grad(s, 0, 1.0)), now=1.0)
    assert s.due_merges(now=1.0) == []
    s.report("L1", "inc-1", 1, 10, 0.1, now=2.0)
    assert s.due_merges(now=2.0) == [0]


# ---- settle: after the budget, until everyone seen is merged again ---------------------------------
def _merge_all(s: SyncerState, learners: dict[str, str], now: float) -> None:
    for lid, inc in learners.items():
        s.submit(contrib(lid, inc, 0, s.versions[0], grad(s, 0, 0.1)), now=now)
    for p in s.due_merges(now):
        s.merge(p, now)


def _settling(**kw) -> SyncerState:
    kw.setdefault("liveness_timeout_s", 5.0)
    return make_state(num_learners=2, min_quorum=1, grace=False, token_budget=100, settle_s=30.0, **kw)


def test_settle_ends_at_once_when_everyone_seen_was_merged_since_it_joined():
    s = _settling()
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    _merge_all(s, {"a": "i", "b": "i"}, now=1.0)
    assert (
        s.report("a", "i", 5, 100, 0.1, now=2.0) is False
    )  # the budget fixes the result; the shell ends training
    assert s.budget_reached and not s.stopped and s.awaited(2.0) == []
    assert s.settle(2.0) is True and s.stopped
    assert s.settle(2.5) is False  # only once


def test_settle_waits_for_a_restarted_learner_to_be_merged_and_keeps_merging_meanwhile():
    s = _settling()
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    _merge_all(s, {"a": "i", "b": "i"}, now=1.0)
    s.join("b", "j", now=2.0)  # killed and restarted: a new incarnation, not merged yet
    s.report("a", "i", 5, 100, 0.1, now=3.0)
    assert s.awaited(3.0) == ["b"] and s.settle(3.0) is False
    assert s.next_deadline(3.0) == pytest.approx(33.0)  # the settle phase ends by then at the latest
    before = s.versions[0]
    _merge_all(s, {"a": "i", "b": "j"}, now=4.0)  # uploads are still merged while settling
    assert s.versions[0] == before + 1 and s.awaited(4.0) == []
    assert s.settle(4.0) is True and s.stopped
    assert (
        reason_of(lambda: s.submit(contrib("a", "i", 0, s.versions[0], grad(s, 0, 0.1)), now=5.0))
        is RejectReason.FINISHED
    )


def test_settle_gives_up_after_settle_s_and_names_who_never_came_back():
    s = _settling()
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    _merge_all(s, {"a": "i", "b": "i"}, now=1.0)
    s.leave("b", "i", now=2.0)  # gone for good
    s.report("a", "i", 5, 100, 0.1, now=3.0)
    assert s.awaited(3.0) == ["b"] and s.settle(32.9) is False
    assert s.settle(33.0) is True and s.stopped


def test_a_learner_silent_longer_than_the_liveness_timeout_is_awaited_until_merged_again():
    s = _settling()
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    _merge_all(s, {"a": "i", "b": "i"}, now=1.0)
    for t in (4.0, 7.0):
        s.report("a", "i", 5, 50, 0.1, now=t)  # a keeps reporting (every 0.5 s in a real run)
    s.report("a", "i", 5, 100, 0.1, now=10.0)  # b partitioned since 1 s
    assert s.awaited(10.0) == ["b"]
    s.report("b", "i", 5, 10, 0.1, now=11.0)  # back, same incarnation: not yet merged again
    assert s.awaited(11.0) == ["b"] and s.settle(11.0) is False
    _merge_all(s, {"b": "i"}, now=12.0)
    assert s.awaited(12.0) == []  # a spoke at 10 s and was merged at 1 s: present and merged


def test_settle_ends_exactly_at_its_own_deadline_despite_rounding():
    # (3.3 + 30) - 3.3 < 30 in floating point: a shell woken at next_deadline must find the phase over.
    s = _settling()
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    s.leave("b", "i", now=1.0)
    s.report("a", "i", 5, 100, 0.1, now=3.3)
    deadline = s.next_deadline(3.3)
    assert deadline == 3.3 + 30.0 and (deadline - 3.3) < 30.0
    assert s.settle(deadline) is True


def test_without_settle_the_budget_finishes_at_once():
    s = make_state(num_learners=2, token_budget=100)
    s.join("a", "i", now=0.0)
    assert s.report("a", "i", 5, 100, 0.1, now=1.0) is True and s.budget_reached


# ---- checkpoints --------------------------------------------------------------------------
def _trained_state():
    s = make_state(
        num_learners=2,
        min_quorum=1,
        sizes={"a": 3, "b": 2},
        num_fragments=2,
        outer_momentum=0.9,
        outer_lr=0.7,
        merge_rule="rda",
        max_staleness=0,
    )
    s.join("a", "i", now=0.0)
    s.join("b", "i", now=0.0)
    s.report("a", "i", 3, 300, 0.1, now=0.0)
    rng = np.random.default_rng(0)
    for k in range(5):
        for p in range(2):
            t = {n: rng.standard_normal(s.params[n].shape).astype(np.float32) for n in s.fragments[p].names}
            s.submit(contrib("a", "i", p, s.versions[p], t), now=float(k))
            s.merge(p, now=float(k))
    return s


def test_checkpoint_round_trip_restores_and_skips_versions(tmp_path):
    s = _trained_state()
    arrays, meta = s.to_checkpoint()
    save_checkpoint(tmp_path, arrays, meta)
    arrays2, meta2, _ = load_latest(tmp_path)
    r = SyncerState.from_checkpoint(s.policy, s.fragments, arrays2, meta2, version_skip=7)
    for n in s.params:
        np.testing.assert_array_equal(r.params[n], s.params[n])
        assert r.params[n].dtype == s.params[n].dtype
    for p in range(2):
        a_leaves = jax.tree_util.tree_leaves(s.opt_states[p])
        b_leaves = jax.tree_util.tree_leaves(r.opt_states[p])
        assert len(a_leaves) == len(b_leaves) > 0
        for x, y in zip(a_leaves, b_leaves):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert r.merges_total == s.merges_total == 10
    assert r.restored_from_merges == 10
    assert r.versions == [v + 7 for v in s.versions]
    assert r.tokens_by_incarnation == s.tokens_by_incarnation
    assert r.incarnation_counts == s.incarnation_counts
    assert r.stopped == s.stopped
    # A new incarnation of a known learner keeps counting.
    assert r.join("a", "i2", now=0.0).incarnation_index == 1


def test_restored_state_merges_exactly_like_the_original():
    s = _trained_state()
    arrays, meta = s.to_checkpoint()
    r = SyncerState.from_checkpoint(s.policy, s.fragments, arrays, meta, version_skip=3)
    r.join("a", "i", now=0.0)
    t = {n: np.full(s.params[n].shape, 0.25, np.float32) for n in s.fragments[0].names}
    s.submit(contrib("a", "i", 0, s.versions[0], t), now=9.0)
    r.submit(contrib("a", "i", 0, r.versions[0], t), now=9.0)
    s.merge(0, now=9.0)
    r.merge(0, now=9.0)
    for n in s.fragments[0].names:
        np.testing.assert_allclose(r.params[n], s.params[n], rtol=1e-6)  # same momentum buffer
    assert r.versions[0] == s.versions[0] + 3


def test_checkpoint_with_wrong_fragment_count_is_refused():
    s = _trained_state()
    arrays, meta = s.to_checkpoint()
    meta = dict(meta, versions=[1, 2, 3])
    with pytest.raises(ValueError, match="fragments"):
        SyncerState.from_checkpoint(s.policy, s.fragments, arrays, meta, version_skip=1)


def test_checkpoint_meta_is_json_serialisable():
    import json

    s = _trained_state()
    _, meta = s.to_checkpoint()
    assert json.loads(json.dumps(meta)) == meta


# ---- checkpoint policy (found by the syncer state-machine test) ---------------------------------------------
def test_checkpoint_is_due_at_start_after_restore_and_after_each_interval():
    s = make_state(checkpoint_every_merges=2)
    join_all(s, 1)
    assert s.checkpoint_due()  # fresh: a crash now must still restore
    arrays, meta = s.to_checkpoint()
    assert not s.checkpoint_due()
    for k in range(2):
        s.submit(contrib("L0", "inc-1", 0, s.versions[0], grad(s, 0, 1.0)), now=float(k))
        s.merge(0, now=float(k))
        assert s.checkpoint_due() == (k == 1)
    r = SyncerState.from_checkpoint(s.policy, s.fragments, arrays, meta, version_skip=2)
    assert r.checkpoint_due()  # else a second crash restores the same versions again


def test_second_crash_never_restores_versions_below_those_served() -> None:
    s = make_state(checkpoint_every_merges=3)
    s.join("L0", "inc-0", now=0.0)
    served: list[int] = []
    saved = s.to_checkpoint()
    for round_ in range(4):  # crash after 2 merges each time, the shell checkpointing when due
        for k in range(2):
            s.submit(contrib("L0", f"inc-{round_}", 0, s.versions[0], grad(s, 0, 1.0)), now=float(k))
            s.merge(0, now=float(k))
            served.append(s.versions[0])
            if s.checkpoint_due():
                saved = s.to_checkpoint()
        s = SyncerState.from_checkpoint(s.policy, s.fragments, *saved, version_skip=3)
        if s.checkpoint_due():
            saved = s.to_checkpoint()
        s.join("L0", f"inc-{round_ + 1}", now=0.0)
        assert s.versions[0] > max(served)


def test_merged_keys_survive_a_restore_so_a_retry_is_a_duplicate():
    s = make_state(max_staleness=2)
    join_all(s, 1)
    c = contrib("L0", "inc-1", 0, 0, grad(s, 0, 1.0))
    s.submit(c, now=0.0)
    s.merge(0, now=0.0)
    r = SyncerState.from_checkpoint(s.policy, s.fragments, *s.to_checkpoint(), version_skip=1)
    r.join("L0", "inc-1", now=1.0)
    assert r.submit(c, now=1.0).duplicate
    assert r.rounds == {}


def _sender(s: SyncerState):
    def send(learner: str, value: float, c_steps: int = 1, now: float = 0.0):
        c = contrib(learner, "inc-1", 0, s.versions[0], grad(s, 0, value), c_steps=c_steps)
        try:
            s.submit(c, now=now)
        except Rejected as r:
            return r.reason
        s.merge(0, now=now)
        return None

    return send


def test_one_huge_first_update_does_not_disable_the_outlier_guard():
    """The reference is the median over learners of each one's latest merged norm: an early outlier stops
    counting once a majority of the learners has been merged (an average kept it, and a float32 norm of 1e20
    made it inf for good)."""
    s = make_state(outer_momentum=0.0)
    join_all(s, 3)
    send = _sender(s)
    assert send("L0", 1e20) is None  # nothing to compare with yet (and no inner lr to bound a step by)
    for _ in range(5):
        assert send("L1", 1.0) is None and send("L2", 1.0) is None
    assert send("L0", 1e12) is RejectReason.OUTLIER_NORM


def test_one_learner_cannot_steer_the_outlier_reference():
    """Many tiny or zero merged updates of one learner are one value among the learners': honest updates stay
    accepted, and a reference of zero never switches the guard off while an inner lr bounds one step."""
    s = make_state(outer_momentum=0.0, inner_lr=1e-3)
    join_all(s, 3)
    send = _sender(s)
    for _ in range(6):
        assert send("L0", 1e-12) is None  # a minority alone sets no reference
    assert send("L1", 5e-4 * 4, c_steps=4) is None  # half an AdamW step per step: honest
    assert send("L2", 5e-4 * 4, c_steps=4) is None
    for _ in range(6):
        assert send("L0", 0.0) is None
    assert send("L1", 5e-4 * 4, c_steps=4) is None  # the median is an honest learner's, not L0's zero
    assert send("L0", 1e30) is RejectReason.OUTLIER_NORM
    s2 = make_state(outer_momentum=0.0, inner_lr=1e-3)
    join_all(s2, 3)
    assert (
        _sender(s2)("L0", 1.0) is RejectReason.OUTLIER_NORM
    )  # 1000 AdamW steps' worth in one: no reference needed


def test_no_coordinate_moves_further_than_its_steps_of_adamw_can():
    """Invariant `value` (docs/security.md): an update within the fragment's L2 bound that puts it all into one
    coordinate is refused; the same norm spread over the fragment is accepted."""
    n = 10_000
    s = make_state(outer_momentum=0.0, inner_lr=1e-3, sizes={"w": n})
    join_all(s, 3)
    l2_budget = 0.9 * claims.adam_step_norm_bound(1e-3, n, s.policy.inner_weight_decay, 0.0)  # per step, in L2
    spread = np.full(n, l2_budget / np.sqrt(n), np.float32)
    spike = np.zeros(n, np.float32)
    spike[7] = l2_budget  # ~100× what one step moves one coordinate
    s.submit(contrib("L0", "inc-1", 0, 0, {"w": spread}), now=1.0)
    with pytest.raises(Rejected, match="coordinate 7 of tensor 'w'"):
        s.submit(contrib("L1", "inc-1", 0, 0, {"w": spike}), now=1.0)


def test_step_counts_are_capped_by_time_at_the_clusters_pace_and_tokens_derived():
    s = make_state(tokens_per_step=64, max_speedup=4.0, overlap_steps=2)
    join_all(s, 3)
    s.report("L0", "inc-1", step=2, tokens=128, step_time_s=0.1, now=0.0)
    s.report("L1", "inc-1", step=2, tokens=128, step_time_s=0.1, now=0.0)
    with pytest.raises(Rejected, match="a step is 64 tokens"):
        s.submit(contrib("L2", "inc-1", 0, 0, grad(s, 0, 1e-3), c_steps=1, c_tokens=2**40), now=1.0)
    # 1 s at a 0.1 s pace: at most 4 × 10 + slack steps, whatever the claim.
    s.submit(contrib("L2", "inc-1", 0, 0, grad(s, 0, 1e-3), c_steps=10**9, c_tokens=64 * 10**9), now=1.0)
    cap = 40 + STEP_SLACK + 2
    (p,) = s.merge(0, now=1.0).participants
    assert (p.c_steps, p.c_tokens) == (cap, 64 * cap)
    # Reports: counted only as fast as time allows since the learner first joined (the slack once); the rest later.
    s.report("L2", "inc-1", step=10**9, tokens=64 * 10**9, step_time_s=0.1, now=2.0)
    assert s.tokens_by_incarnation["L2/inc-1"] == 64 * (4 * 20 + STEP_SLACK + 2)
    before = s.tokens_by_incarnation["L2/inc-1"]
    s.report("L2", "inc-1", step=10**9, tokens=64 * 10**9, step_time_s=0.1, now=3.0)
    assert s.tokens_by_incarnation["L2/inc-1"] == before + 64 * 4 * 10
    with pytest.raises(Rejected, match="out of range"):
        s.report("L2", "inc-1", step=2**62, tokens=64 * 2**62, step_time_s=0.1, now=3.0)


def _paced(now: float = 0.0) -> SyncerState:
    """Three learners joined at ``now``, two reporting a 0.1 s step: the cluster's pace is 0.1 s."""
    s = make_state(tokens_per_step=64, max_speedup=4.0, overlap_steps=2)
    join_all(s, 3, now=now)
    for lid in ("L0", "L1"):
        s.report(lid, "inc-1", step=0, tokens=0, step_time_s=0.1, now=now)
    return s


def _counted(s: SyncerState, learner_id: str) -> int:
    return sum(v for k, v in s.tokens_by_incarnation.items() if k.startswith(f"{learner_id}/"))


# Invariant `budget` (docs/security.md): over 10 s at a 0.1 s pace, 4 × 100 steps plus the slack once, however often
# a learner reports and under however many incarnations.
BUDGET_10S = 64 * (4 * 100 + STEP_SLACK + 2)


def test_reports_sent_often_count_no_faster_than_time_allows():
    s = _paced()
    for i in range(1, 1001):  # a Report every 10 ms, each claiming far more than it could have trained
        s.report("L2", "inc-1", step=10**9, tokens=64 * 10**9, step_time_s=0.1, now=i * 0.01)
    assert _counted(s, "L2") <= BUDGET_10S, _counted(s, "L2") / BUDGET_10S


def test_cycling_incarnations_counts_no_faster_than_time_allows():
    s = _paced()
    for i in range(1, 1001):  # a new incarnation every 10 ms, each claiming a fresh cumulative count
        s.join("L2", f"inc-{i}", now=i * 0.01)
        s.report("L2", f"inc-{i}", step=10**9, tokens=64 * 10**9, step_time_s=0.1, now=i * 0.01)
    assert _counted(s, "L2") <= BUDGET_10S, _counted(s, "L2") / BUDGET_10S


def test_an_honest_learner_at_the_pace_is_counted_in_full():
    s = _paced()
    for i in range(1, 101):  # one step per 0.1 s, a Report each step
        for lid in ("L0", "L1"):
            s.report(lid, "inc-1", step=i, tokens=64 * i, step_time_s=0.1, now=i * 0.1)
    assert _counted(s, "L0") == _counted(s, "L1") == 64 * 100


def test_a_refused_upload_or_report_changes_nothing():
    s = make_state(tokens_per_step=64)
    join_all(s, 2)
    before = (s.learners["L0"].last_seen, dict(s.tokens_by_incarnation), s.versions[:], dict(s.step_times))
    for c_steps, c_tokens, base in ((2**63 - 1, 0, 0), (1, 65, 0), (1, 64, -1), (-1, 64, 0)):
        with pytest.raises(Rejected):
            s.submit(
                contrib("L0", "inc-1", 0, base, grad(s, 0, 1e-3), c_steps=c_steps, c_tokens=c_tokens), now=9.0
            )
    for step, tokens, step_s in ((1, 65, 0.1), (2**53, 64 * 2**53, 0.1), (1, 64, float("nan")), (1, 64, 1e9)):
        with pytest.raises(Rejected):
            s.report("L0", "inc-1", step=step, tokens=tokens, step_time_s=step_s, now=9.0)
    assert (s.learners["L0"].last_seen, dict(s.tokens_by_incarnation), s.versions[:], dict(s.step_times)) == before


def test_data_parallel_applies_one_adamw_update_to_the_mean_gradient_with_the_progress_decay():
    import optax

    from trainer.core.outer import AdamWSpec, progress_scale

    spec = AdamWSpec(lr=0.01, warmup_steps=0, weight_decay=0.1, grad_clip=1.0, decay="cosine")
    params = {"w": np.array([0.5, -1.0, 2.0, 0.0], np.float32)}
    s = make_state(
        num_learners=2,
        min_quorum=2,
        params=params,
        outer_adamw=spec,
        merge_rule="mean",
        token_budget=1000,
        max_norm_ratio=0.0,
    )
    ids = join_all(s, 2)
    s.report(ids[0], "inc-1", step=1, tokens=300, step_time_s=0.1, now=0.0)
    s.report(ids[1], "inc-1", step=1, tokens=200, step_time_s=0.1, now=0.0)  # progress 0.5
    g0, g1 = np.array([3.0, -1.0, 0.0, 2.0], np.float32), np.array([1.0, 1.0, 4.0, 0.0], np.float32)
    for lid, g in zip(ids, (g0, g1)):
        assert s.submit(contrib(lid, "inc-1", 0, 0, {"w": g}), now=1.0).accepted
    s.merge(0, now=1.0)

    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.01, b1=0.9, b2=0.95, weight_decay=0.1))
    updates, _ = tx.update({"w": (g0 + g1) / 2}, tx.init(params), params)
    want = params["w"] + progress_scale(spec, 0.5) * np.asarray(updates["w"])
    assert 0.5 < progress_scale(spec, 0.5) < 1 and np.abs(want - params["w"]).min() > 1e-4
    np.testing.assert_allclose(s.params["w"], want, rtol=1e-6, atol=1e-7)
    assert s.versions == [1]


def test_warm_up_compiles_every_fragment_step_before_the_first_merge_and_changes_nothing():
    """The syncer's first merges must not wait for a compile (it held CI's container run ~3 s, failing the merge
    audit's lag bound): after warm_up, merging each fragment compiles nothing; warm_up itself changes no state."""
    from trainer.core.outer import _compiled

    st_ = make_state(num_learners=2, sizes={"w": 6, "b": 3, "e": 5}, num_fragments=3)
    join_all(st_, 2)
    before = snapshot(st_)
    st_.warm_up()
    assert_same_snapshot(before, snapshot(st_))
    step = _compiled(st_.optimizer)
    compiled = step._cache_size()
    for p in range(3):
        for i, lid in enumerate(("L0", "L1")):
            st_.submit(contrib(lid, "inc-1", p, 0, grad(st_, p, 0.1 * (i + 1)), c_tokens=64 * (i + 1)), now=1.0)
        st_.merge(p, now=1.0)
    assert st_.versions == [1, 1, 1]
    assert step._cache_size() == compiled, "a merge compiled a step warm_up did not"
