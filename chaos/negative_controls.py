"""Negative controls: deliberately wrong set-ups, each of which one named checker must fail.

A checker that cannot fail proves nothing. One home for them: ``tests/chaos/test_negative_controls.py`` runs
each per change (with assertions on the evidence), and ``benchmarks/costs/under_load.py`` runs each repeatedly under
CPU load to measure that they fail every time.

Example:
    >>> sorted(c.must_fail for c in CONTROLS)
    ['liveness', 'reference', 'reintegration', 'safety']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chaos.scenario import Scenario, scenario_with


@dataclass(frozen=True)
class NegativeControl:
    name: str
    why: str
    scenario: Callable[[], Scenario]
    must_fail: str  # the checker that must report "fail"
    baseline: bool = False  # whether the run needs its fault-free baseline


def reference_scenario(algorithm: dict) -> Scenario:
    """The fault-free reference-check scenario the last control breaks (``{}``: the defaults).

    Fault-free, 600k tokens: the check compares the trainer with synchronous DiLoCo, not a fault's effect (so
    parity, and with it the fault-free baseline runs, are off: only the reference run is computed).
    """
    return scenario_with(
        "kill-one-learner",
        schedule=[],
        cluster={"token_budget": 600_000, "algorithm": algorithm},
        checks={
            "liveness": {"enabled": False},
            "parity": {"enabled": False},
            "reference": {"enabled": True, "tolerance": 0.05},
        },
    )


CONTROLS: tuple[NegativeControl, ...] = (
    NegativeControl(
        "quorum-of-all",
        "K = M: one dead learner and no round can ever reach its quorum again",
        lambda: scenario_with("kill-one-learner", cluster={"algorithm": {"min_quorum": 3}}),
        "liveness",
    ),
    NegativeControl(
        "never-rejoins",
        "a killed learner that is never restarted",
        lambda: scenario_with("kill-one-learner", checks={"reintegration": {"enabled": True}}),
        "reintegration",
    ),
    NegativeControl(
        "corrupt-unvalidated",
        "NaN uploads with the syncer's validation off",
        # A long corrupt window: a restarted learner can take many seconds to compile on a loaded machine (the
        # nightly of 2026-12-03 16:25: 18 s from the inject to the corrupt learner's start, 7 s more without an
        # upload before a 25 s window healed it, and safety rightly passed; 50 s leaves ~25 s of NaN uploads). Late
        # uploads are carried: with the default (refuse) a learner that a loaded machine slows to several times
        # the cluster's pace misses every round's merge (CI: 21 of 22 NaN uploads refused as late_round), and
        # the control would then test the machine's load, not whether safety sees NaN parameters.
        lambda: scenario_with(
            "corrupt-learner",
            cluster={"syncer": {"validate_uploads": False}, "algorithm": {"late_uploads": "carry"}},
            schedule=[{"fault": "corrupt", "mode": "nan", "targets": ["learner-1"], "at": 2, "duration": 50}],
        ),
        "safety",
    ),
    NegativeControl(
        "outer-lr-1/70",
        "outer steps 1/70 of DiLoCo's: the global model barely moves",
        lambda: reference_scenario({"outer_lr": 0.01}),
        "reference",
        baseline=True,
    ),
)
