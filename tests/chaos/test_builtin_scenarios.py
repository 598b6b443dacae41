"""Every built-in scenario, run for real: local processes, the real Toxiproxy, real gRPC, real JAX (nightly).

Each must pass every check, leave nothing behind, and show the fault's own
effect in the recorded history (a partition stops that learner's uploads, a
bandwidth cap slows them, a syncer crash is restored from its checkpoint ...). Per change, every built-in runs
in deterministic mode (tests/property/test_scenarios_deterministic.py) and a kill, a partition and a syncer crash
run for real under CPU load (test_under_load.py).
"""

from __future__ import annotations

import pytest

from chaos.checkers import CHECKERS
from chaos.history import History
from chaos.scenario import builtin_scenarios, scenario_with
from tests.effects import EFFECTS
from tests.support import assert_result_at_budget

pytestmark = pytest.mark.chaos

BUILTINS = [scenario_with(name) for name in sorted(builtin_scenarios())]
# What the built-ins run between them: every fault kind in their schedules, every check they enable.
COVERED = sorted(
    {f.fault for s in BUILTINS for f in s.schedule if hasattr(f, "fault")}
    | {c for s in BUILTINS for c in CHECKERS if getattr(s.checks, c).enabled}
)


def test_every_builtin_has_an_effect_check() -> None:
    missing = set(builtin_scenarios()) - set(EFFECTS) - {"kill-and-rejoin"}
    assert not missing, f"add an effect check for {missing}"


@pytest.mark.chaos_nightly
@pytest.mark.chaos_rotate(per_night=3)
@pytest.mark.covers(*COVERED)
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario(name: str, run_chaos) -> None:
    result = run_chaos(scenario_with(name))
    failed = [f"{v.name}: {v.status}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert not failed, f"{name}: " + "; ".join(failed)
    assert result.exit_code == 0
    teardown = result.report.teardown
    assert teardown.proxies_left == [] and teardown.processes_left == []
    assert not result.report.not_run, "a planned fault never ran: the run ended too early"
    history = History.read(result.out_dir)
    assert_result_at_budget(result.verdicts)
    for w in history.fault_windows():
        assert w.injected and w.healed, f"{w.fault_id} not injected and healed: {w}"
    for artifact in ("report.json", "report.md", "timeline.png", "history.jsonl"):
        assert (result.out_dir / artifact).stat().st_size > 0
    if name in EFFECTS:
        EFFECTS[name](history, result)
