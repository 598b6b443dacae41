"""Unit tests for chaos.scale.outages (the seeded failure process and each unit's outage intervals)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.scale.config import build_scale_config
from chaos.scale.outages import Outages, unit_outages

DETECT, RESTART, RECONFIGURE = 10.0, 61.0, 11.0


def plan(
    *,
    elastic=False,
    mode="sync-diloco",
    learners=1,
    chips=100,
    mtbi=0,
    schedule=(),
    rejoin=0.0,
    seed=0,
    duration=3600,
):
    """A small plan with explicit recovery times (independent of the package's calibrated defaults)."""
    alg = {"mode": mode} if mode == "data-parallel" else {"mode": mode, "num_learners": learners}
    return build_scale_config(
        {
            "seed": seed,
            "duration": duration,
            "elastic": elastic,
            "cluster": {"chips": chips},
            "failures": {"mtbi_per_chip": mtbi, "schedule": list(schedule)},
            "recovery": {
                "detect_s": DETECT,
                "restart_s": RESTART,
                "reconfigure_s": RECONFIGURE,
                "rejoin_s": rejoin,
            },
            "algorithm": alg,
        }
    )


def manual(starts, ends, elastic=False) -> Outages:
    starts = np.asarray(starts, dtype=float)
    return Outages(starts, np.asarray(ends, dtype=float), starts.copy(), elastic)


# ---- the failure process --------------------------------------------------------------------
def test_no_failures_without_mtbi_or_schedule():
    """mtbi_per_chip = 0 and an empty schedule: every unit is always up."""
    outs = unit_outages(plan(learners=3, mtbi=0), 1e6)
    assert len(outs) == 3
    for o in outs:
        assert len(o) == 0 and o.failures == 0
        assert o.down_before(1e6) == 0.0 and o.work_before(500.0) == 500.0 and not o.is_out(10.0)


def test_one_outages_entry_per_unit():
    """unit_outages returns one Outages per learner, and one for the data-parallel job."""
    assert len(unit_outages(plan(learners=5, mtbi=1e6), 1e4)) == 5
    assert len(unit_outages(plan(mode="data-parallel", mtbi=1e6), 1e4)) == 1


def _signature(outs):
    return [(o.starts.tolist(), o.ends.tolist(), o.failure_times.tolist()) for o in outs]


def test_same_seed_same_outages():
    """The failure process is deterministic given the seed."""
    cfg = plan(learners=4, chips=1000, mtbi=1e6, seed=7)
    a, b = unit_outages(cfg, 1e5), unit_outages(cfg, 1e5)
    assert sum(o.failures for o in a) > 10
    assert _signature(a) == _signature(b)


def test_other_seed_other_outages():
    """Another seed draws another failure process."""
    a = unit_outages(plan(learners=4, chips=1000, mtbi=1e6, seed=7), 1e5)
    b = unit_outages(plan(learners=4, chips=1000, mtbi=1e6, seed=8), 1e5)
    assert _signature(a) != _signature(b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_failure_count_matches_chips_over_mtbi(seed):
    """The number of failures is Poisson with mean chips / mtbi * horizon (within 5 standard deviations)."""
    chips, mtbi, horizon = 2000, 1e6, 5e5  # mean 1000 failures
    outs = unit_outages(plan(learners=4, chips=chips, mtbi=mtbi, seed=seed), horizon)
    n = sum(o.failures for o in outs)
    mean = chips / mtbi * horizon
    assert abs(n - mean) <= 5 * math.sqrt(mean)


def test_failures_spread_evenly_over_units():
    """A uniformly chosen chip is on a uniformly chosen unit: each of M units gets about 1/M of the failures."""
    m, chips, mtbi, horizon = 4, 4000, 1e6, 1e6  # mean 4000 failures, 1000 per unit
    outs = unit_outages(plan(learners=m, chips=chips, mtbi=mtbi, seed=3), horizon)
    total = sum(o.failures for o in outs)
    p = 1 / m
    sd = math.sqrt(total * p * (1 - p))
    for o in outs:
        assert abs(o.failures - total * p) <= 5 * sd


def test_failure_times_lie_within_the_horizon():
    """Random failures fall in [0, horizon); scheduled failures at or after the horizon are dropped."""
    horizon = 1e4
    cfg = plan(
        learners=2,
        chips=1000,
        mtbi=1e5,
        seed=1,
        schedule=[{"at": horizon, "learner": 0}, {"at": 2 * horizon, "learner": 1}],
    )
    outs = unit_outages(cfg, horizon)
    times = np.concatenate([o.failure_times for o in outs])
    assert len(times) > 0
    assert times.min() >= 0 and times.max() < horizon


def test_failure_times_are_sorted():
    """Each unit's failure_times (random and scheduled together) are in time order."""
    cfg = plan(
        learners=2,
        chips=1000,
        mtbi=1e5,
        seed=4,
        schedule=[{"at": 5000, "learner": 0}, {"at": 10, "learner": 0}, {"at": 7000, "learner": 1}],
    )
    for o in unit_outages(cfg, 1e4):
        assert np.all(np.diff(o.failure_times) >= 0)
    assert 10.0 in unit_outages(cfg, 1e4)[0].failure_times.tolist()


# ---- outage lengths ----------------------------------------------------------------------------
def test_non_elastic_outage_is_detect_plus_restart_plus_rejoin():
    """A non-elastic unit is out for detect_s + restart_s + rejoin_s after a failure."""
    (o,) = unit_outages(plan(elastic=False, rejoin=7.0, schedule=[{"at": 100, "learner": 0}]), 1000.0)
    assert o.starts.tolist() == [100.0]
    assert o.ends.tolist() == [100.0 + DETECT + RESTART + 7.0]
    assert o.elastic is False


def test_elastic_outage_is_detect_plus_reconfigure_without_rejoin():
    """An elastic unit pauses for detect_s + reconfigure_s; rejoin_s does not apply (it never restarts)."""
    (o,) = unit_outages(plan(elastic=True, rejoin=7.0, schedule=[{"at": 100, "learner": 0}]), 1000.0)
    assert o.starts.tolist() == [100.0]
    assert o.ends.tolist() == [100.0 + DETECT + RECONFIGURE]
    assert o.elastic is True


@pytest.mark.parametrize("elastic", [False, True])
def test_random_outages_all_have_the_recovery_length(elastic):
    """Every random outage lasts exactly the recovery time: absorbed failures never lengthen it."""
    down = DETECT + (RECONFIGURE if elastic else RESTART + 5.0)
    outs = unit_outages(plan(elastic=elastic, learners=2, chips=1000, mtbi=2e5, rejoin=5.0, seed=2), 1e5)
    lengths = np.concatenate([o.ends - o.starts for o in outs])
    assert len(lengths) > 100
    np.testing.assert_allclose(lengths, down)


def test_elastic_recovers_faster_than_non_elastic_for_the_same_failures():
    """For the same seed the failures are the same, and elastic outages are shorter in total."""
    kw = dict(learners=2, chips=1000, mtbi=2e5, seed=5)
    el = unit_outages(plan(elastic=True, **kw), 1e5)
    ne = unit_outages(plan(elastic=False, **kw), 1e5)
    for a, b in zip(el, ne):
        assert a.failure_times.tolist() == b.failure_times.tolist()
        assert a.down_before(1e5) < b.down_before(1e5)


def test_scheduled_down_s_replaces_detect_and_restart():
    """A scheduled failure's down_s replaces detect_s + restart_s; rejoin_s is still added (non-elastic)."""
    (o,) = unit_outages(plan(elastic=False, rejoin=2.0, schedule=[{"at": 50, "learner": 0, "down_s": 300}]), 1e3)
    assert o.starts.tolist() == [50.0]
    assert o.ends.tolist() == [50.0 + 300.0 + 2.0]


def test_scheduled_down_s_replaces_the_pause_when_elastic():
    """For an elastic unit a scheduled down_s is the whole pause."""
    (o,) = unit_outages(plan(elastic=True, rejoin=2.0, schedule=[{"at": 50, "learner": 0, "down_s": 300}]), 1e3)
    assert o.ends.tolist() == [350.0]


def test_scheduled_down_s_zero_still_counts_the_failure():
    """down_s = 0 (non-elastic, no rejoin) is a failure with an empty outage: counted, never out."""
    (o,) = unit_outages(plan(elastic=False, schedule=[{"at": 50, "learner": 0, "down_s": 0}]), 1e3)
    assert o.failures == 1
    assert o.down_before(1e3) == 0.0


def test_scheduled_failure_hits_only_its_learner():
    """A scheduled failure on learner 2 leaves learners 0 and 1 untouched."""
    outs = unit_outages(plan(learners=3, schedule=[{"at": 50, "learner": 2}]), 1e3)
    assert [o.failures for o in outs] == [0, 0, 1]
    assert outs[2].starts.tolist() == [50.0]


# ---- absorption --------------------------------------------------------------------------------
def test_failure_during_an_outage_is_absorbed():
    """A failure that hits a unit already out adds no interval, but counts in failure_times."""
    (o,) = unit_outages(plan(elastic=False, schedule=[{"at": 100, "learner": 0}, {"at": 120, "learner": 0}]), 1e3)
    assert o.starts.tolist() == [100.0]
    assert o.ends.tolist() == [100.0 + DETECT + RESTART]  # not extended by the second failure
    assert o.failure_times.tolist() == [100.0, 120.0]
    assert o.failures == 2 and len(o) == 1


def test_failure_right_after_an_outage_starts_a_new_one():
    """A failure at (or after) the end of an outage is a new outage, not absorbed."""
    end = 100.0 + DETECT + RESTART
    (o,) = unit_outages(plan(elastic=False, schedule=[{"at": 100, "learner": 0}, {"at": end, "learner": 0}]), 1e3)
    assert o.starts.tolist() == [100.0, end]
    assert o.failures == 2


def test_absorbed_failures_happen_at_high_failure_rates():
    """With failures much more frequent than recoveries, many are absorbed: fewer intervals than failures."""
    (o,) = unit_outages(plan(mode="data-parallel", chips=1000, mtbi=1e4, seed=0), 1e4)  # ~1000 failures, 71 s each
    assert o.failures > 500
    assert 0 < len(o) < o.failures


# ---- queries: down_before, work_before, is_out, wall_of_work -----------------------------------------
def test_down_before_inside_and_between_outages():
    """down_before counts whole outages before t and the part of one t is inside."""
    o = manual([10, 50], [20, 55])
    assert o.down_before(0) == 0
    assert o.down_before(10) == 0
    assert o.down_before(15) == 5
    assert o.down_before(20) == 10
    assert o.down_before(52) == 12
    assert o.down_before(1000) == 15
    assert o.down_between(15, 52) == 7
    assert o.work_before(30) == 20


def test_is_out_is_half_open():
    """Outages are [start, end): out at the start, back at the end."""
    o = manual([10], [20])
    assert not o.is_out(9.999)
    assert o.is_out(10.0)
    assert o.is_out(19.999)
    assert not o.is_out(20.0)


def test_wall_of_work_inverts_work_before_on_known_intervals():
    """Work w is done at w plus the outages before it; work finishing exactly at an outage start finishes before it."""
    o = manual([10, 50], [20, 55])
    got = o.wall_of_work(np.array([0.0, 5.0, 10.0, 10.5, 40.0, 41.0])).tolist()
    assert got == [0.0, 5.0, 10.0, 20.5, 50.0, 56.0]


@pytest.mark.parametrize("elastic", [False, True])
def test_wall_of_work_of_work_before_is_identity_outside_outages(elastic):
    """wall_of_work(work_before(t)) == t for every t not inside an outage (or at its end)."""
    (o,) = unit_outages(plan(mode="data-parallel", elastic=elastic, chips=1000, mtbi=2e6, seed=11), 1e5)
    assert len(o) > 10
    rng = np.random.default_rng(0)
    ts = np.sort(rng.uniform(0, 1e5, 2000))
    inside = np.array([any(s <= t <= e for s, e in zip(o.starts, o.ends)) for t in ts])
    ts = ts[~inside]
    work = np.array([o.work_before(t) for t in ts])
    np.testing.assert_allclose(o.wall_of_work(work), ts, rtol=0, atol=1e-6)


def test_work_before_is_monotone_and_flat_during_outages():
    """Work never decreases, grows at rate 1 while up, and stands still during an outage."""
    o = manual([10, 50], [20, 55])
    ts = np.linspace(0, 100, 401)
    work = np.array([o.work_before(t) for t in ts])
    assert np.all(np.diff(work) >= 0)
    assert o.work_before(12) == o.work_before(18) == 10
    assert o.work_before(30) - o.work_before(25) == pytest.approx(5)


# ---- properties ---------------------------------------------------------------------------------
_schedules = st.lists(
    st.fixed_dictionaries(
        {"at": st.floats(0, 2000, allow_nan=False), "learner": st.integers(0, 2)},
        optional={"down_s": st.floats(0, 400, allow_nan=False)},
    ),
    max_size=8,
)


@settings(max_examples=30, deadline=None)
@given(
    schedule=_schedules,
    mtbi=st.sampled_from([0, 1e5, 1e6]),
    elastic=st.booleans(),
    rejoin=st.floats(0, 50),
    seed=st.integers(0, 2**16),
)
def test_outages_are_sorted_disjoint_and_queries_agree(schedule, mtbi, elastic, rejoin, seed):
    """For any plan: intervals sorted, non-empty-or-empty but disjoint, every failure accounted for, and
    down_before / is_out agree with a brute-force sum over the intervals."""
    horizon = 2000.0
    cfg = plan(
        learners=3,
        chips=30,
        mtbi=mtbi,
        elastic=elastic,
        rejoin=rejoin,
        schedule=schedule,
        seed=seed,
        duration=horizon,
    )
    outs = unit_outages(cfg, horizon)
    scheduled = sum(1 for f in schedule if f["at"] < horizon)
    assert sum(o.failures for o in outs) >= scheduled
    for u, o in enumerate(outs):
        s, e = o.starts, o.ends
        assert np.all(e >= s)
        assert np.all(s[1:] >= e[:-1])  # disjoint, in order
        assert len(o) <= o.failures
        assert set(s.tolist()) <= set(o.failure_times.tolist())  # each outage starts at a failure
        # every failure is either an outage start or inside an outage (absorbed)
        for f in o.failure_times.tolist():
            assert any(a <= f < b for a, b in zip(s.tolist(), e.tolist())) or f in s.tolist()
        for t in np.linspace(0, horizon * 1.2, 37).tolist() + s.tolist() + e.tolist():
            brute = float(np.sum(np.clip(np.minimum(e, t) - s, 0, None)))
            assert o.down_before(t) == pytest.approx(brute, abs=1e-9)
            assert o.is_out(t) == any(a <= t < b for a, b in zip(s.tolist(), e.tolist()))
        assert sum(1 for f in schedule if f["learner"] == u and f["at"] < horizon) <= o.failures


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), elastic=st.booleans())
def test_outages_are_deterministic_for_a_seed(seed, elastic):
    """Two draws with the same plan give identical outages."""
    cfg = plan(learners=3, chips=300, mtbi=1e5, elastic=elastic, seed=seed, duration=1e4)
    assert _signature(unit_outages(cfg, 1e4)) == _signature(unit_outages(cfg, 1e4))
