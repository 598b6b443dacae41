"""Properties of Decoupled DiLoCo under generated fault schedules, in deterministic mode.

Safety holds for every schedule, admissible or not; liveness and
reintegration hold for every admissible one (at most M − K learners out at
once). The Hypothesis profile (``chaos``, ``chaos-nightly``) sets how many schedules each property tries.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from chaos.pytest_plugin import chaos_examples, chaos_settings
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from chaos.strategies import FaultSchedule, fault_schedules, max_down_at_once, outer_step_seconds, to_scenario

pytestmark = pytest.mark.chaos_simulation

OPTS = SimOptions()
BASE = scenario_with(
    "kill-and-rejoin",
    name="property",
    schedule=[],
    cluster={"token_budget": 1_200_000},
    checks={"liveness": {"max_gap_s": 10}, "reintegration": {"within_s": 20}},
)
OUTER_S = outer_step_seconds(BASE, OPTS.step_time_s)


def _run(schedule: FaultSchedule):
    return simulate(to_scenario(BASE, schedule, OUTER_S), OPTS)


@chaos_settings()
@given(fault_schedules(learners=3, max_faults=5, max_down=3))
def test_safety_and_durability_hold_for_every_schedule(schedule: FaultSchedule) -> None:
    r = _run(schedule)
    bad = r.failed("safety", "durability")
    assert not bad, f"{schedule.describe()}: {[v.summary for v in bad]}"
    assert not (r.timed_out or r.stalled), f"{schedule.describe()}: the run never finished"


@chaos_settings()
@given(fault_schedules(learners=3, max_faults=5, min_quorum=1))
def test_liveness_and_reintegration_hold_for_every_admissible_schedule(schedule: FaultSchedule) -> None:
    assert max_down_at_once(schedule) <= 2
    r = _run(schedule)
    bad = r.failed("liveness", "reintegration")
    assert not bad, f"{schedule.describe()}: {[v.summary for v in bad]}"


@chaos_settings(examples=max(chaos_examples() // 5, 3))
@given(fault_schedules(learners=3, max_faults=3))
def test_same_seed_and_schedule_replay_bit_for_bit(schedule: FaultSchedule) -> None:
    assert _run(schedule).history_json() == _run(schedule).history_json()


def test_a_quorum_of_all_learners_is_not_live_under_a_kill() -> None:
    """Negative control: the liveness property can fail (K = M, one learner killed for a long time)."""
    s = scenario_with(
        "kill-and-rejoin",
        name="k-eq-m",
        cluster={"token_budget": 1_200_000, "algorithm": {"min_quorum": 3}},
        schedule=[{"fault": "kill", "targets": ["learner-1"], "at": 1, "duration": 14}],
        checks={"liveness": {"max_gap_s": 10}},
    )
    assert simulate(s, OPTS).failed("liveness")


def test_replay_is_bit_for_bit_across_processes_and_hash_seeds() -> None:
    """Nothing may depend on object addresses or string hashing: two interpreters, two PYTHONHASHSEEDs."""
    import hashlib
    import os
    import subprocess
    import sys

    code = (
        "import hashlib; from chaos.scenario import scenario_with; from chaos.sim import simulate; "
        "s = scenario_with('random-mix', cluster={'token_budget': 600000}); "
        "print(hashlib.sha256(simulate(s).history_json().encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    here = hashlib.sha256(
        simulate(scenario_with("random-mix", cluster={"token_budget": 600000})).history_json().encode()
    ).hexdigest()
    assert digests == {here}
