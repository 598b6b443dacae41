"""Every built-in scenario and negative control in deterministic mode, per change (their real runs: nightly).

The same scenario files, planner and checkers as a real run, on the virtual clock: each built-in must pass
every check, run every planned fault, inject and heal each, and finish; and where its fault leaves a mark that
the simulator models (a partition stops uploads, two of three learners cut still leave merges), that mark is
asserted with the same effect checks as the real-process runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.negative_controls import CONTROLS, NegativeControl
from chaos.scenario import builtin_scenarios, scenario_with
from chaos.sim import SimOptions, simulate
from tests.effects import EFFECTS
from tests.support import assert_result_at_budget

pytestmark = pytest.mark.chaos_simulation

# The effect checks that need real processes' timing (exit codes, measured sync seconds, step rates); every
# other one reads only what the simulator records, and runs here too.
REAL_ONLY = {"kill-one-learner", "throttle-all", "latency-jitter", "straggler"}
SIMULATED_EFFECTS = {name: check for name, check in EFFECTS.items() if name not in REAL_ONLY}


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_in_deterministic_mode(name: str, tmp_path: Path) -> None:
    s = scenario_with(name)
    # The built-ins emulate an accelerator: each learner sleeps step_delay_s inside every step, on top of its
    # compute (SimOptions' default pace). At the default pace alone random-mix reaches its budget while its last
    # fault is still active, and its reintegration is undecided.
    r = simulate(s, SimOptions(step_time_s=SimOptions().step_time_s + s.cluster.learner.step_delay_s))
    failed = [f"{v.name}: {v.status}: {v.summary}" for v in r.verdicts if v.status != "pass"]
    assert not failed and not r.timed_out, f"{name}: " + "; ".join(failed or ["timed out"])
    assert_result_at_budget(r.verdicts)
    result = r.write(tmp_path)
    assert result.exit_code == 0 and not result.report.not_run, "a planned fault never ran"
    for w in r.history.fault_windows():
        assert w.injected and w.healed, f"{w.fault_id} not injected and healed: {w}"
    if name in SIMULATED_EFFECTS:
        SIMULATED_EFFECTS[name](r.history, result)


@pytest.mark.parametrize("control", [c for c in CONTROLS if c.must_fail != "reference"], ids=lambda c: c.name)
def test_negative_control_in_deterministic_mode(control: NegativeControl) -> None:
    """Each negative control the simulator can run fails its checker (the reference check needs a real
    synchronous DiLoCo run: its control runs for real, per change, in tests/chaos/test_negative_controls.py)."""
    r = simulate(control.scenario(), SimOptions(baseline=control.baseline))
    v = next(v for v in r.verdicts if v.name == control.must_fail)
    assert v.status == "fail", v
    assert r.exit_code == 1
