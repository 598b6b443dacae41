"""Nightly: many generated schedules (the Hypothesis profile's examples, seed --hypothesis-seed) against the
healthy trainer."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.pytest_plugin import OPTIONS, chaos_examples
from chaos.scenario import scenario_with
from chaos.search import find_failure
from chaos.strategies import fault_schedules
from faults.kinds import LOCAL_KINDS

pytestmark = pytest.mark.chaos_nightly(minutes=6)  # measured 2026-12-02, the longest member


@pytest.mark.chaos_simulation
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("max_down", [None, 3], ids=["admissible", "any"])
def test_long_search_finds_no_failing_schedule(max_down: int | None, chaos_run_dir: Path) -> None:
    """Many generated schedules (the profile's examples, seed --hypothesis-seed) against the healthy trainer.

    Admissible schedules must keep every check; schedules that take every
    learner out may stall liveness and reintegration, never safety or durability.
    """
    template = scenario_with("kill-and-rejoin", name="nightly", schedule=[], cluster={"token_budget": 2_400_000})
    checks = (
        ("liveness", "reintegration", "durability", "safety") if max_down is None else ("durability", "safety")
    )
    simulated: list[object] = []
    found = find_failure(
        template,
        schedules=fault_schedules(kinds=LOCAL_KINDS, max_faults=6, max_down=max_down),
        checks=checks,
        max_examples=chaos_examples(),
        seed=OPTIONS.seed,
        on_example=lambda schedule, _: simulated.append(schedule),
    )
    assert simulated, "the search simulated no schedule: it proves nothing"
    if found is not None:
        path = found.write(chaos_run_dir / "repro.yaml")
        pytest.fail(
            f"seed {OPTIONS.seed}: {found.schedule.describe()} fails "
            f"{[v.summary for v in found.result.failed(*checks)]}; repro: {path}"
        )
