"""Nightly: every built-in scenario for real at four times its token budget, two a night in turn."""

from __future__ import annotations

import pytest

from chaos.scenario import builtin_scenarios, scenario_with

pytestmark = pytest.mark.chaos_nightly(minutes=13)  # measured 2026-12-02, the longest member


@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.chaos_rotate(per_night=2)
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_at_four_times_the_budget(name: str, run_chaos) -> None:
    s = scenario_with(name)
    result = run_chaos(scenario_with(name, cluster={"token_budget": 4 * s.cluster.token_budget}))
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed
