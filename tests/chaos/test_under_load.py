"""A kill, a partition and a syncer crash decide under CPU load, as they must on a shared CI runner.

The per-change tier's proof that verdicts do not flip with the machine's load: the same built-ins as
test_builtin_scenarios, with busy processes on every core (chaos.load.CpuLoad, seeded) for the whole run,
baseline included when it is not cached yet.
"""

from __future__ import annotations

import pytest

from chaos.load import CpuLoad
from chaos.scenario import scenario_with

pytestmark = pytest.mark.chaos


@pytest.mark.covers("kill", "partition", "syncer_crash", "liveness", "reintegration", "parity", "durability", "safety",
                     "goodput")
@pytest.mark.parametrize("name,seed", [("kill-and-rejoin", 1), ("partition-one", 2), ("syncer-crash", 3)])
def test_builtin_scenario_passes_under_cpu_load(name: str, seed: int, run_chaos) -> None:
    with CpuLoad(seed=seed):
        result = run_chaos(scenario_with(name))
    verdicts = {v.name: f"{v.status}: {v.summary}" for v in result.verdicts}
    assert result.exit_code == 0, f"{name} under load: {verdicts}"
