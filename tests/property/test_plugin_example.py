"""docs/pytest-plugin.md's example of a user's own chaos property test, verbatim: it must keep working."""

from hypothesis import given

from chaos.pytest_plugin import chaos_settings
from chaos.scenario import scenario_with
from chaos.strategies import fault_schedules, outer_step_seconds, to_scenario

BASE = scenario_with("kill-and-rejoin", schedule=[], cluster={"algorithm": {"min_quorum": 2}})


@chaos_settings(examples=5)
@given(schedule=fault_schedules(learners=3, min_quorum=2))
def test_my_config_stays_live(schedule, simulate_chaos):
    result = simulate_chaos(to_scenario(BASE, schedule, outer_step_seconds(BASE, 0.03)))
    assert not result.failed("liveness", "safety")
