"""Generated fault schedules: bounds hold for every draw, and schedules become valid scenarios."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.fault_plan import plan
from chaos.scenario import parse_scenario
from chaos.strategies import (
    FaultSchedule,
    GeneratedFault,
    fault_schedules,
    max_down_at_once,
    outer_step_seconds,
    to_scenario,
)
from faults.kinds import LOCAL_KINDS

BASE = parse_scenario({"name": "base", "cluster": {"algorithm": {"num_learners": 4, "sync_every": 8}}})


@settings(max_examples=150, database=None)
@given(st.data(), st.integers(0, 4), st.integers(1, 6))
def test_never_more_than_max_down_learners_out_at_once(data, max_down, max_faults) -> None:
    s = data.draw(fault_schedules(learners=4, max_faults=max_faults, max_down=max_down))
    assert max_down_at_once(s) <= max_down
    assert len(s) <= max_faults


@settings(max_examples=100, database=None)
@given(fault_schedules(learners=4, min_quorum=2, max_faults=5, horizon=30, max_duration=7))
def test_default_bound_is_admissible_and_draws_stay_in_range(s: FaultSchedule) -> None:
    assert max_down_at_once(s) <= 2  # M - K
    for f in s.faults:
        assert f.kind in LOCAL_KINDS
        assert 0 <= f.start < 30 and 1 <= f.duration <= 7
        assert len(set(f.targets)) == len(f.targets)


@settings(max_examples=60, database=None)
@given(fault_schedules(learners=4, max_faults=4))
def test_every_schedule_is_a_valid_scenario_with_times_in_seconds(s: FaultSchedule) -> None:
    outer = outer_step_seconds(BASE, 0.05)
    scenario = to_scenario(BASE, s, outer)
    planned = plan(scenario)
    assert [p.kind for p in planned] == [f.kind for f in s.faults]
    for p, f in zip(planned, s.faults):
        assert p.at == pytest.approx(f.start * 0.4) and p.duration == pytest.approx(f.duration * 0.4)
        assert p.targets == f.targets


def test_one_way_loss_of_replies_does_not_count_as_down() -> None:
    assert GeneratedFault("partition", ("learner-0",), 0, 1, {"direction": "from_syncer"}).removes() == ()
    assert GeneratedFault("partition", ("learner-0",), 0, 1, {"direction": "to_syncer"}).removes() == (
        "learner-0",
    )
    assert GeneratedFault("latency", ("learner-0",), 0, 1, {"latency_ms": 5}).removes() == ()
    assert GeneratedFault("syncer_crash", ("syncer",), 0, 1).removes() == ()


def test_overlap_is_counted_only_while_both_last() -> None:
    a = GeneratedFault("kill", ("learner-0",), 0, 5)
    b = GeneratedFault("pause", ("learner-1",), 5, 5)  # starts as a ends
    c = GeneratedFault("stop", ("learner-2",), 4, 2)
    assert max_down_at_once(FaultSchedule((a, b))) == 1
    assert max_down_at_once(FaultSchedule((a, b, c))) == 2


def test_empty_kinds_is_refused() -> None:
    @settings(max_examples=1, database=None)
    @given(fault_schedules(kinds=()))
    def draw(_: FaultSchedule) -> None:
        pass

    with pytest.raises(ValueError, match="kinds is empty"):
        draw()
