"""Invariants ``pace`` and ``round`` (docs/security.md) over generated insider behaviour, each with its negative
control: the same property run with the defence removed, on an attack it must then let through.

The pure core, no I/O, time as plain floats. M configured learners; the insiders are a minority of the slots,
(M − 1) // 2 of them, colluding (they all send what the strategy draws, in any order, at any time); the honest
learners report their step times once, upload at an honest speed, and otherwise may fall silent for longer than
the liveness timeout, so that as few as one of them is active while the insiders go on.

- ``pace``: the cluster's pace stays within the honest learners' step times, whatever the insiders report and
  however few honest learners are active; the steps any claim may count follow from it.
- ``round``: the hold a round grants an announced upload (max(3 × t_upload, one step)) stays within what the
  honest learners' own uploads need, however slowly the insiders upload.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import syncer_policy
from trainer.core.ema import Ema
from trainer.core.fragments import partition_tensors
from trainer.core.inflight import hold_seconds
from trainer.core.rounds import cluster_pace
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState

LIVENESS_S = 5.0
HOSTILE_STEP_TIMES = st.one_of(
    st.sampled_from([1e-12, 1e-6, 1e-3, 3600.0]), st.floats(min_value=1e-9, max_value=3600.0, allow_nan=False)
)


def cluster(m: int) -> tuple[SyncerState, list[str], list[str]]:
    policy = syncer_policy(
        num_learners=m,
        min_quorum=1,
        sync_every=4,
        rounds="clock",
        max_staleness=3,
        liveness_timeout_s=LIVENESS_S,
    )
    s = SyncerState.create(policy, partition_tensors({"w": 2}, 1), {"w": np.zeros(2, np.float32)})
    k = (m - 1) // 2
    honest, insiders = [f"h{i}" for i in range(m - k)], [f"x{i}" for i in range(k)]
    for lid in honest + insiders:
        s.join(lid, "i", now=0.0)
    return s, honest, insiders


# ---- pace -------------------------------------------------------------------------------------------------
# An insider's move: (seconds that pass first, which insider, its reported step time, whether it first joins as a
# new incarnation).
insider_reports = st.lists(
    st.tuples(st.floats(0.0, 20.0), st.integers(0, 10), HOSTILE_STEP_TIMES, st.booleans()), max_size=25
)


def check_pace(m: int, honest_times: list[float], moves: list[tuple[float, int, float, bool]]) -> None:
    """Run the insiders' moves after every honest learner has reported once; the pace stays within the honest
    step times after each (the honest learners say nothing more: after LIVENESS_S they are all away)."""
    s, honest, insiders = cluster(m)
    for lid, t in zip(honest, honest_times):
        s.report(lid, "i", step=1, tokens=s.policy.tokens_per_step, step_time_s=t, now=0.0)
    lo, hi = min(honest_times), max(honest_times)
    now, incarnations = 0.0, dict.fromkeys(insiders, 0)
    for dt, who, step_time, rejoin in moves:
        now += dt
        lid = insiders[who % len(insiders)]
        if rejoin:
            incarnations[lid] += 1
            s.join(lid, f"i{incarnations[lid]}", now=now)
        inc = f"i{incarnations[lid]}" if incarnations[lid] else "i"
        s.report(lid, inc, step=1, tokens=s.policy.tokens_per_step, step_time_s=step_time, now=now)
        pace = s.pace(now)
        assert pace is not None and lo <= pace <= hi, (pace, lo, hi, len(s.active_learners(now)))
        assert lo <= s.clock.pace_s <= hi, s.clock  # the clock that opens rounds follows the same pace
        possible = s.steps_possible(0.0, now)
        assert possible is not None and possible <= s.policy.max_speedup * now / lo + 10, possible


@settings(max_examples=60, deadline=None)
@given(
    m=st.sampled_from([3, 4, 5, 7]),
    honest_times=st.lists(st.floats(0.02, 2.0), min_size=7, max_size=7),
    moves=insider_reports,
)
def test_insiders_move_the_pace_no_further_than_the_honest_step_times(m, honest_times, moves) -> None:
    k = (m - 1) // 2
    check_pace(m, honest_times[: m - k], moves)


def _pace_of_the_active_learners(self: SyncerState, now: float) -> float | None:
    """The defence removed: the lower median of the step times the *active* learners report (before issue 41)."""
    active = {r.learner_id for r in self.active_learners(now)}
    return cluster_pace(t for lid, t in self.step_times.items() if lid in active)


def test_pace_negative_control(monkeypatch) -> None:
    """Without the M slots (the pace of the active learners only), one insider sets the pace once the honest
    learners have gone quiet for a liveness timeout: the property fails."""
    monkeypatch.setattr(SyncerState, "pace", _pace_of_the_active_learners)
    with pytest.raises(AssertionError):
        check_pace(3, [0.1, 0.1], [(LIVENESS_S + 1, 0, 1e-6, False)])


# ---- round ------------------------------------------------------------------------------------------------
def up(s: SyncerState, lid: str, r: int, upload_s: float) -> Contribution:
    w = {"w": np.full(2, -0.01, np.float32)}
    per = s.policy.tokens_per_step
    return Contribution(lid, "i", 0, s.versions[0], w, 4, 4 * per, round=r, upload_seconds=upload_s)


def check_hold(m: int, honest_upload_s: list[float], insider_upload_s: list[list[float]]) -> None:
    """Round after round, every learner uploads its fragment (the insiders taking as long as drawn, up to a long
    call's limit); the hold stays within what the honest learners' uploads need."""
    s, honest, insiders = cluster(m)
    for lid in honest + insiders:
        s.report(
            lid, "i", step=1, tokens=s.policy.tokens_per_step, step_time_s=0.25, now=0.0
        )  # the clock: round r opens at t = 1 + r
    step = s.timing.t_step.get()
    for r, slow in enumerate(insider_upload_s):
        now = 1.0 + r + 0.01
        for lid, u in zip(honest, honest_upload_s):
            s.submit(up(s, lid, r, u), now=now)
        for i, lid in enumerate(insiders):
            s.submit(up(s, lid, r, slow[i % len(slow)]), now=now)
        for p in s.due_merges(now + 1.0):
            s.merge(p, now + 0.5)
        assert s.hold_s <= hold_seconds(max(honest_upload_s), step) + 1e-9, (s.hold_s, honest_upload_s)


@settings(max_examples=30, deadline=None)
@given(
    m=st.sampled_from([3, 4, 5, 7]),
    honest_upload_s=st.lists(st.floats(0.001, 0.2), min_size=7, max_size=7),
    insider_upload_s=st.lists(st.lists(st.floats(0.0, 600.0), min_size=1, max_size=3), min_size=1, max_size=8),
)
def test_insiders_stretch_no_round_beyond_what_the_honest_uploads_need(
    m, honest_upload_s, insider_upload_s
) -> None:
    k = (m - 1) // 2
    check_hold(m, honest_upload_s[: m - k], insider_upload_s)


def _upload_times_pooled(self: SyncerState, c: Contribution, now: float) -> None:
    """The defence removed: one moving average over everyone's uploads (before issue 41)."""
    if c.upload_seconds > 0:
        self.timing = self.timing.observe_upload(c.upload_seconds)


def test_round_negative_control(monkeypatch) -> None:
    """With one moving average over all uploads, one insider's slow uploads stretch every round's hold."""
    monkeypatch.setattr(SyncerState, "_observe_upload", _upload_times_pooled)
    with pytest.raises(AssertionError):
        check_hold(3, [0.02, 0.02], [[60.0]] * 3)


def test_the_hold_follows_the_median_learner_one_value_each() -> None:
    s, honest, insiders = cluster(3)
    for lid in honest + insiders:
        s.report(lid, "i", step=1, tokens=s.policy.tokens_per_step, step_time_s=0.25, now=0.0)
    for lid, u in (("h0", 0.1), ("h1", 0.3), ("x0", 50.0)):
        s.submit(up(s, lid, 0, u), now=1.01)
    assert s.timing.t_upload.get() == statistics.median_low([0.1, 0.3, 50.0]) == 0.3  # 50 s moves it one rank
    assert isinstance(s.upload_times["x0"], Ema) and s.upload_times["x0"].get() == 50.0
