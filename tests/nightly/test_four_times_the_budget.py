"""Nightly: every built-in scenario for real at four times its token budget, two a night in turn.

Parity against the same-seed fault-free run alone (``baseline_seeds: 1``): at the built-ins' tolerances one
baseline and the 3-seed band had the same measured false-alarm rate (0 of 10 under load at ±0.02 and ±0.05,
docs/scenarios-and-checks.md), and the band's two extra runs at 4x were half of this file's ~25 min a night
(2026-12-03). The built-ins at their own budget judge against the band nightly (tests/chaos/test_builtin_scenarios.py).
"""

from __future__ import annotations

import pytest

from chaos.scenario import builtin_scenarios, scenario_with

pytestmark = pytest.mark.chaos_nightly(
    minutes=10
)  # 17 min with the band (2026-12-03, slow VM), the longest member


@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.chaos_rotate(per_night=2)
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_at_four_times_the_budget(name: str, run_chaos) -> None:
    s = scenario_with(name)
    result = run_chaos(
        scenario_with(
            name, cluster={"token_budget": 4 * s.cluster.token_budget}, checks={"parity": {"baseline_seeds": 1}}
        )
    )
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed
