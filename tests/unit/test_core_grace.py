"""Unit tests for trainer.core.grace (minimum quorum and the adaptive grace window).

Times are plain floats: a fake clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.ema import Ema
from trainer.core.grace import QuorumPolicy, Timing, effective_overlap, grace_seconds, merge_time, waited_for

SETTINGS = settings(max_examples=100, deadline=None)


def _timing(t_step: float, t_quorum: float, t_sync: float) -> Timing:
    return Timing(t_step=Ema(value=t_step), t_quorum=Ema(value=t_quorum), t_upload=Ema(value=t_sync))


def _policy(**kw) -> QuorumPolicy:
    base: dict[str, Any] = dict(min_quorum=2, grace=True, grace_gamma=0.5, grace_cap_steps=1.0, overlap_steps=2)
    base.update(kw)
    return QuorumPolicy(**base)


def test_slack_formula():
    # slack = 2 * 0.3 - (0.1 + 0.05) = 0.45; grace = 0.5 * 0.45
    assert grace_seconds(_policy(), _timing(0.3, 0.1, 0.05)) == pytest.approx(0.225)
    # tau enters linearly
    assert grace_seconds(_policy(overlap_steps=4, grace_cap_steps=2.0), _timing(0.3, 0.1, 0.05)) == pytest.approx(
        0.5 * (1.2 - 0.15)
    )


@SETTINGS
@given(
    st.floats(min_value=0, max_value=10),
    st.floats(min_value=0, max_value=10),
    st.floats(min_value=0, max_value=10),
    st.floats(min_value=0, max_value=0.99),
    st.floats(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=8),
)
def test_grace_is_clamped_gamma_times_slack(t_step, t_quorum, t_sync, gamma, cap, tau):
    p = _policy(grace_gamma=gamma, grace_cap_steps=cap, overlap_steps=tau)
    g = grace_seconds(p, _timing(t_step, t_quorum, t_sync))
    slack = tau * t_step - (t_quorum + t_sync)
    assert 0.0 <= g <= cap * t_step
    assert g == pytest.approx(min(max(gamma * slack, 0.0), cap * t_step), abs=1e-12)


def test_negative_slack_gives_zero():
    assert grace_seconds(_policy(), _timing(0.1, 0.5, 0.5)) == 0.0


def test_grace_is_capped_in_steps():
    # slack 20 s would give 10 s; the cap is a quarter of the 10 s step
    assert grace_seconds(_policy(grace_cap_steps=0.25), _timing(10.0, 0.0, 0.0)) == 2.5
    # 2.5 s steps, 1.6 s fragment uploads: γ·slack = 0.5 × (5 − 1.6) = 1.7 s, under the default cap of one step
    # (a cap of 1 s would cut it to 1.0 and leave out every learner whose upload takes 1.6 s)
    assert grace_seconds(_policy(), _timing(2.5, 0.0, 1.6)) == pytest.approx(1.7)


def test_disabled_grace_is_zero():
    assert grace_seconds(_policy(grace=False), _timing(10.0, 0.0, 0.0)) == 0.0


def test_no_samples_yet_means_no_slack():
    assert grace_seconds(_policy(), Timing()) == 0.0


def test_merge_time_is_none_before_quorum():
    p, t = _policy(min_quorum=2), _timing(1.0, 0.0, 0.0)
    assert merge_time(p, t, quorum_at=None, contributions=0, active_learners=3) is None
    assert merge_time(p, t, quorum_at=None, contributions=1, active_learners=3) is None
    # contributions below K never merge, whatever quorum_at says
    assert merge_time(p, t, quorum_at=5.0, contributions=1, active_learners=3) is None


def test_merge_time_is_quorum_plus_grace_after_quorum():
    p, t = _policy(min_quorum=2, grace_cap_steps=10.0), _timing(1.0, 0.2, 0.2)
    grace = grace_seconds(p, t)
    assert grace == pytest.approx(0.8)
    assert merge_time(p, t, quorum_at=10.0, contributions=2, active_learners=4) == pytest.approx(10.8)


def test_merge_is_immediate_when_every_active_learner_contributed():
    p, t = _policy(min_quorum=2, grace_cap_steps=10.0), _timing(1.0, 0.0, 0.0)
    assert grace_seconds(p, t) > 0
    assert merge_time(p, t, quorum_at=7.0, contributions=3, active_learners=3) == 7.0
    assert merge_time(p, t, quorum_at=7.0, contributions=3, active_learners=2) == 7.0


def test_merge_time_without_grace_is_quorum_time():
    p, t = _policy(grace=False), _timing(1.0, 0.0, 0.0)
    assert merge_time(p, t, quorum_at=3.5, contributions=2, active_learners=5) == 3.5


def test_docstring_example():
    p = QuorumPolicy(min_quorum=1, grace=True, grace_gamma=0.5, grace_cap_steps=1.0, overlap_steps=2)
    t = _timing(0.1, 0.0, 0.05)
    assert grace_seconds(p, t) == pytest.approx(0.075)
    assert merge_time(p, t, quorum_at=10.0, contributions=1, active_learners=3) == pytest.approx(10.075)


def test_timing_observations_update_the_right_average():
    t = Timing.with_alpha(0.5)
    t = t.observe_step(1.0).observe_step(3.0).observe_quorum(0.4).observe_upload(0.2).observe_upload(0.4)
    t = t.observe_merge(0.05).observe_broadcast(0.1)
    assert t.t_step.value == pytest.approx(2.0)
    assert t.t_quorum.value == pytest.approx(0.4)
    assert (t.t_upload.value, t.t_merge.value, t.t_broadcast.value) == pytest.approx((0.3, 0.05, 0.1))
    # t_sync is the paper's: upload + merge + broadcast, each averaged over its own samples.
    assert t.t_sync == pytest.approx(0.45)


def test_ema():
    e = Ema(alpha=0.5)
    assert e.value is None and e.get(7.0) == 7.0
    e2 = e.update(2.0).update(4.0)
    assert e2.value == pytest.approx(3.0)
    assert e.value is None  # immutable


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(min_quorum=0), "min_quorum"),
        (dict(min_quorum=-1), "min_quorum"),
        (dict(grace_gamma=1.0), "gamma"),
        (dict(grace_gamma=-0.1), "gamma"),
        (dict(grace_cap_steps=-0.5), "grace_cap_steps"),
    ],
)
def test_quorum_policy_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _policy(**kwargs)


def test_quorum_policy_accepts_boundaries():
    p = _policy(min_quorum=1, grace_gamma=0.0, grace_cap_steps=0.0)
    assert grace_seconds(p, _timing(10.0, 0.0, 0.0)) == 0.0


# ---- overlap_steps: auto ------------------------------------------------------------------
def test_auto_overlap_covers_the_round_trip_and_opens_the_window_on_a_slow_link():
    """0.56 s to quorum and a 1.1 s round trip on 50 ms steps: τ = 2 leaves no slack (every round merged at its
    first upload); auto takes τ = ⌈1.66 / 0.05⌉ + 1 = 35, and the window is γ × (35 × 0.05 − 1.66) = 0.045 s."""
    slow = _timing(0.05, 0.56, 1.1)
    assert grace_seconds(_policy(), slow) == 0.0
    assert effective_overlap(_policy(overlap_auto=True), slow) == 35
    assert grace_seconds(_policy(overlap_auto=True), slow) == pytest.approx(0.5 * (35 * 0.05 - 1.66))


def test_auto_overlap_never_goes_below_its_floor_and_needs_a_step_time():
    fast = _timing(0.05, 0.0, 0.01)  # the round trip fits in one step: the floor (τ = 2) stands
    assert effective_overlap(_policy(overlap_auto=True), fast) == 2
    assert grace_seconds(_policy(overlap_auto=True), fast) == grace_seconds(_policy(), fast)
    assert effective_overlap(_policy(overlap_auto=True), Timing()) == 2  # no step time yet: the floor


@SETTINGS
@given(
    st.floats(min_value=1e-3, max_value=10),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=100),
    st.integers(0, 8),
)
def test_auto_overlap_leaves_at_least_a_step_of_slack(t_step, t_quorum, t_sync, floor):
    """τ_auto·t_step ≥ t_quorum + t_sync + t_step: a slow round never shuts the window by itself."""
    t = _timing(t_step, t_quorum, t_sync)
    tau = effective_overlap(_policy(overlap_auto=True, overlap_steps=floor), t)
    assert tau >= floor and tau * t_step >= (t_quorum + t_sync + t_step) * (1 - 1e-6)


@SETTINGS
@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(0, 20)), unique_by=lambda x: x[0]),
    st.sets(st.sampled_from("abcdef")),
    st.floats(0, 5),
)
def test_a_round_waits_for_those_in_and_those_heard_lately_never_more_than_the_active(active, contributed, within):
    now = 20.0
    n = waited_for(active, contributed, now, within)
    assert waited_for(active, contributed, now, None) == len(active) >= n
    assert n == len({lid for lid, heard in active if lid in contributed or now - heard <= within})
