"""The nightly tier: long runs, many generated schedules, parity at full model size.

Deselected unless ``pytest --chaos-nightly`` (``scripts/nightly`` passes it
with a fresh ``--chaos-seed`` each night and keeps every run's reports).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.pytest_plugin import OPTIONS
from chaos.scenario import builtin_scenarios, scenario_with
from chaos.search import find_failure
from chaos.strategies import LOCAL_KINDS, fault_schedules

pytestmark = pytest.mark.nightly

# The small model (3.3M parameters) at ~3k tokens/s on the 2-core CI machine: ~11 min per run. At 2M tokens it
# is far from converged (eval 5.59 -> ~4.3) and runs differ by timing alone: kill-and-rejoin ended 0.16 below
# its baseline (measured 2026-11-30). The tolerance is set above that spread: this catches gross regressions.
FULL_SIZE = {"cluster": {"model": {"size": "small"}, "token_budget": 2_000_000}, "timeout_s": 2400,
             "checks": {"parity": {"tolerance": 0.3}}}


@pytest.mark.simulation
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("max_down", [None, 3], ids=["admissible", "any"])
def test_long_search_finds_no_failing_schedule(max_down: int | None, chaos_run_dir: Path) -> None:
    """Many generated schedules (--chaos-examples × 4, seed --chaos-seed) against the healthy trainer.

    Admissible schedules must keep every check; schedules that take every
    learner out may stall liveness and reintegration, never safety or durability.
    """
    template = scenario_with("kill-and-rejoin", name="nightly", schedule=[], cluster={"token_budget": 2_400_000})
    checks = ("liveness", "reintegration", "durability", "safety") if max_down is None else ("durability", "safety")
    found = find_failure(template, schedules=fault_schedules(kinds=LOCAL_KINDS, max_faults=6, max_down=max_down),
                         checks=checks, max_examples=OPTIONS.examples * 4, seed=OPTIONS.seed)
    if found is not None:
        path = found.write(chaos_run_dir / "repro.yaml")
        pytest.fail(f"seed {OPTIONS.seed}: {found.schedule.describe()} fails "
                    f"{[v.summary for v in found.result.failed(*checks)]}; repro: {path}")


@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_at_four_times_the_budget(name: str, run_chaos) -> None:
    s = scenario_with(name)
    result = run_chaos(scenario_with(name, cluster={"token_budget": 4 * s.cluster.token_budget}))
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed


@pytest.mark.chaos
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("name", ["kill-and-rejoin", "syncer-crash", "partition-majority"])
def test_parity_at_full_model_size(name: str, run_chaos) -> None:
    """The small model (3.3M parameters): same final loss as its fault-free baseline, within the tolerance."""
    result = run_chaos(scenario_with(name, **FULL_SIZE))
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed
