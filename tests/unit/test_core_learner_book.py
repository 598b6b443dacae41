"""Unit tests for trainer.core.learner_book (a learner's per-fragment bookkeeping)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.learner_book import LearnerBook, SyncStart


def book(p=2, h=4, tau=1, staggered=True, versions=None, blocking=False) -> LearnerBook:
    sched = FragmentSchedule(num_fragments=p, sync_every=h, overlap_steps=tau, staggered=staggered)
    return LearnerBook(sched, versions=list(versions) if versions is not None else [0] * p, blocking=blocking)


def test_docstring_example():
    b = book(p=2, h=2, tau=1)
    assert b.on_step(step=1, tokens=64) == [SyncStart(fragment=0, base_version=0, c_steps=1, c_tokens=64, step=1)]
    b.offer(0, version=1, payload="theta")
    assert b.ready(step=1) == []
    assert b.ready(step=2) == [(0, 1, "theta")]
    assert b.counters(0) == (0, 0)


def test_versions_must_match_fragment_count():
    with pytest.raises(ValueError, match="3 versions for 2 fragments"):
        book(p=2, versions=[0, 0, 0])


# ---- counters --------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=512), min_size=1, max_size=20))
def test_counters_count_steps_and_tokens_for_every_fragment(tokens):
    b = book(p=3, h=100, tau=0)  # no sync within 20 steps
    for step, t in enumerate(tokens, start=1):
        assert b.on_step(step, t) == []
    for p in range(3):
        assert b.counters(p) == (len(tokens), sum(tokens))


def test_sync_start_carries_counters_and_base_version():
    b = book(p=2, h=4, tau=1, versions=[5, 7])
    starts = []
    for step, t in enumerate([10, 20, 30, 40], start=1):
        starts += b.on_step(step, t)
    # offsets: fragment 0 at step 2, fragment 1 at step 4
    assert starts == [SyncStart(0, 5, 2, 30, 2), SyncStart(1, 7, 4, 100, 4)]
    assert b.in_flight() == {0: 5, 1: 7}


def test_counters_reset_on_receipt_only_for_that_fragment():
    b = book(p=2, h=4, tau=0)
    for step in (1, 2):
        b.on_step(step, 16)
    b.offer(0, version=1, payload="x")
    assert b.ready(step=2) == [(0, 1, "x")]
    assert b.counters(0) == (0, 0)
    assert b.counters(1) == (2, 32)
    b.on_step(3, 16)
    assert b.counters(0) == (1, 16)
    assert b.counters(1) == (3, 48)
    assert b.held == [1, 0]


# ---- overlap τ ------------------------------------------------------------------
@pytest.mark.parametrize("tau", [0, 1, 3, 7])
def test_received_fragment_waits_for_apply_step(tau):
    b = book(p=1, h=2, tau=tau)
    b.on_step(1, 8)
    (start,) = b.on_step(2, 8)
    apply_step = start.step + tau
    b.offer(0, version=1, payload="g")  # arrives right away
    for step in range(2, apply_step):
        assert b.ready(step) == []
        assert b.held == [0]
    assert b.ready(apply_step) == [(0, 1, "g")]
    assert b.held == [1]
    assert b.in_flight() == {}
    assert b.ready(apply_step + 1) == []  # applied once


def test_late_arrival_is_applied_at_once():
    b = book(p=1, h=1, tau=1)
    b.on_step(1, 8)
    assert b.ready(5) == []  # nothing arrived yet
    b.offer(0, version=1, payload="late")
    assert b.ready(5) == [(0, 1, "late")]


def test_fragment_without_a_sync_in_flight_applies_at_once():
    b = book(p=2, h=8, tau=4)
    b.offer(1, version=3, payload="fetched")
    assert b.ready(0) == [(1, 3, "fetched")]
    assert b.held == [0, 3]


# ---- versions ------------------------------------------------------------------------
def test_older_or_equal_versions_are_ignored():
    b = book(p=1, h=4, tau=0, versions=[3])
    b.offer(0, version=3, payload="same")
    b.offer(0, version=2, payload="older")
    assert b.ready(10) == []
    assert b.held == [3]


def test_newest_offer_wins():
    b = book(p=1, h=4, tau=0, versions=[0])
    b.offer(0, version=5, payload="v5")
    b.offer(0, version=4, payload="v4")
    b.offer(0, version=2, payload="v2")
    assert b.ready(1) == [(0, 5, "v5")]
    b.offer(0, version=5, payload="again")
    b.offer(0, version=1, payload="old")
    assert b.ready(2) == []
    assert b.held == [5]


# ---- in-flight syncs ---------------------------------------------------------------------
def test_second_sync_is_skipped_while_the_first_is_in_flight():
    b = book(p=1, h=1, tau=3)
    assert [s.step for s in b.on_step(1, 8)] == [1]
    assert b.on_step(2, 8) == []  # due again, but the first is unanswered
    assert b.skipped == 1
    assert b.on_step(3, 8) == []
    assert b.skipped == 2
    assert b.counters(0) == (3, 24)  # counters carry on
    b.sync_failed(0, base_version=0)
    assert b.in_flight() == {}
    (s,) = b.on_step(4, 8)
    assert (s.step, s.base_version, s.c_steps, s.c_tokens) == (4, 0, 4, 32)
    assert b.skipped == 2
    assert b.in_flight() == {0: 0}


def test_sync_allowed_again_after_receipt():
    b = book(p=1, h=1, tau=0)
    b.on_step(1, 8)
    b.offer(0, version=1, payload="a")
    assert b.ready(1) == [(0, 1, "a")]
    (s,) = b.on_step(2, 8)
    assert s.base_version == 1 and b.skipped == 0


def test_sync_failed_with_other_base_version_changes_nothing():
    b = book(p=1, h=1, tau=3)
    b.on_step(1, 8)
    b.sync_failed(0, base_version=9)
    assert b.in_flight() == {0: 0}
    assert b.on_step(2, 8) == [] and b.skipped == 1


def test_failed_sync_does_not_hold_back_a_received_fragment():
    b = book(p=1, h=2, tau=5)
    b.on_step(1, 8)
    b.on_step(2, 8)
    b.sync_failed(0, base_version=0)
    b.offer(0, version=2, payload="p")
    assert b.ready(3) == [(0, 2, "p")]  # nothing to overlap with any more


# ---- blocking --------------------------------------------------------------------------------
def test_blocking_mode_waits_for_fragments_past_their_apply_step():
    b = book(p=2, h=2, tau=1, staggered=False, blocking=True)
    assert b.on_step(1, 8) == []
    assert [s.fragment for s in b.on_step(2, 8)] == [0, 1]
    assert b.waiting_for(2) == []  # apply_step is 3
    assert b.waiting_for(3) == [0, 1]
    b.offer(0, version=1, payload="a")
    assert b.ready(3) == [(0, 1, "a")]
    assert b.waiting_for(3) == [1]
    b.offer(1, version=1, payload="b")
    assert b.ready(3) == [(1, 1, "b")]
    assert b.waiting_for(3) == []


def test_blocking_mode_does_not_wait_for_failed_syncs():
    b = book(p=1, h=1, tau=0, blocking=True)
    b.on_step(1, 8)
    assert b.waiting_for(1) == [0]
    b.sync_failed(0, base_version=0)
    assert b.waiting_for(1) == []


def test_non_blocking_mode_never_waits():
    b = book(p=2, h=2, tau=0, staggered=False, blocking=False)
    b.on_step(1, 8)
    b.on_step(2, 8)
    assert b.in_flight() == {0: 0, 1: 0}
    for step in (2, 3, 100):
        assert b.waiting_for(step) == []
