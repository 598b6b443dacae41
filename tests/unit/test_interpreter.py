"""The fault-plan interpreter both the controller and deterministic mode drive (chaos.interpreter)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.fault_plan import Planned, plan
from chaos.interpreter import RUN_FINISHED, SKIPPED, Heal, Inject, PlanInterpreter, carry_out
from chaos.scenario import parse_scenario


def planned(*faults: dict) -> list[Planned]:
    return plan(
        parse_scenario(
            {
                "name": "t",
                "cluster": {"algorithm": {"num_learners": 3}},
                "schedule": [{"targets": ["learner-0"], **f} for f in faults],
            }
        )
    )


def names(steps: list) -> list[tuple[str, str]]:
    return [(type(s).__name__, s.planned.fault_id) for s in steps]


def _wake(run: PlanInterpreter) -> float:
    """When the plan next has something to do (it has: a fault to inject or heal)."""
    t = run.next_time()
    assert t is not None
    return t


def test_a_fault_starts_at_its_time_and_heals_after_its_duration() -> None:
    run = PlanInterpreter(planned({"fault": "pause", "id": "p", "at": 5.1, "duration": 2.2}), origin=12.3)
    assert run.due(now=17.3, merges=9) == []
    assert run.next_time() == 12.3 + 5.1
    assert names(run.due(now=_wake(run), merges=9)) == [("Inject", "p")]  # exactly at the wake time
    assert run.due(now=19.0, merges=9) == []
    assert names(run.due(now=_wake(run), merges=9)) == [("Heal", "p")]
    assert run.next_time() is None and run.finish() == [] and run.not_run() == []


def test_at_merge_starts_on_the_merge_count_and_injections_come_before_heals() -> None:
    run = PlanInterpreter(
        planned(
            {"fault": "latency", "id": "a", "latency_ms": 5, "at": 0, "duration": 1},
            {"fault": "pause", "id": "b", "at_merge": 4, "duration": 1},
        ),
        origin=0.0,
    )
    assert names(run.due(now=0.0, merges=1)) == [("Inject", "a")]
    assert names(run.due(now=1.0, merges=4)) == [("Inject", "b"), ("Heal", "a")]


def test_no_fault_starts_once_the_result_is_fixed_but_active_ones_still_heal() -> None:
    run = PlanInterpreter(
        planned(
            {"fault": "pause", "id": "a", "at": 0, "duration": 5},
            {"fault": "pause", "id": "b", "at": 1, "duration": 1},
        ),
        origin=0.0,
    )
    assert names(run.due(now=0.0, merges=1)) == [("Inject", "a")]
    assert names(run.due(now=5.0, merges=9, result_fixed=True)) == [("Heal", "a")]
    assert run.not_run() == ["b"]


def test_the_end_of_a_run_skips_heals_that_would_restart_a_unit() -> None:
    run = PlanInterpreter(
        planned(
            {"fault": "kill", "id": "k", "at": 0, "duration": 9},
            {"fault": "partition", "id": "p", "at": 0, "duration": 9},
        ),
        origin=0.0,
    )
    run.due(now=0.0, merges=1)
    assert [(s.planned.fault_id, s.why, s.skip) for s in run.finish()] == [
        ("k", RUN_FINISHED, True),
        ("p", RUN_FINISHED, False),
    ]
    run = PlanInterpreter(
        planned(
            {"fault": "kill", "id": "k", "at": 0, "duration": 9},
            {"fault": "partition", "id": "p", "at": 0, "duration": 9},
        ),
        origin=0.0,
    )
    run.due(now=0.0, merges=1)
    assert [(s.planned.fault_id, s.why, s.skip) for s in run.finish("teardown")] == [
        ("k", RUN_FINISHED, True),
        ("p", "teardown", False),
    ]


FAULT = st.fixed_dictionaries(
    {"fault": st.sampled_from(["pause", "kill", "partition", "latency"]), "duration": st.integers(0, 5)},
    optional={"at": st.integers(0, 10), "at_merge": st.integers(0, 10)},
)


@settings(max_examples=200, database=None, deadline=None)
@given(st.lists(FAULT, max_size=6), st.lists(st.tuples(st.floats(0, 3), st.booleans()), max_size=30))
def test_every_started_fault_heals_exactly_once_and_none_starts_twice(faults, ticks) -> None:
    faults = [
        {**f, "id": f"f{i}", **({"latency_ms": 5} if f["fault"] == "latency" else {})}
        for i, f in enumerate(faults)
        if ("at" in f) != ("at_merge" in f)
    ]
    run = PlanInterpreter(planned(*faults), origin=100.0)
    now, merges, fixed, steps = 100.0, 0, False, []
    for dt, merge in ticks:
        now, merges = now + dt, merges + merge
        fixed = fixed or merges > 8
        due = run.due(now, merges, fixed)
        assert not (fixed and any(isinstance(s, Inject) for s in due)), (
            "a fault started after the result was fixed"
        )
        steps += due
    steps += run.finish()
    injected = [s.planned.fault_id for s in steps if isinstance(s, Inject)]
    healed = [s.planned.fault_id for s in steps if isinstance(s, Heal)]
    assert len(injected) == len(set(injected)) and sorted(injected) == sorted(healed)
    assert sorted(injected + run.not_run()) == sorted(f["id"] for f in faults)


# ---- recording a step (carry_out: the controller's and deterministic mode's one record builder) ------------
def _ops(step, act, **kw) -> tuple[list, str | None]:
    ops: list = []
    return ops, carry_out(step, act, ops.append, clock=lambda: 7.0, **kw)


def test_a_step_is_recorded_as_invoke_then_ok_with_its_evidence() -> None:
    [p] = planned({"fault": "pause", "id": "p", "at": 1, "duration": 2})
    ops, err = _ops(Inject(p), lambda: {"paused": ["learner-0"]}, description="SIGSTOP learner-0")
    assert err is None
    assert [(o.action, o.outcome, o.evidence, o.description, o.ts) for o in ops] == [
        ("inject", "invoke", {}, "SIGSTOP learner-0", 7.0),
        ("inject", "ok", {"paused": ["learner-0"]}, "SIGSTOP learner-0", 7.0),
    ]
    assert all((o.fault_id, o.fault_kind, o.targets) == ("p", "pause", ["learner-0"]) for o in ops)


def test_a_failed_step_is_recorded_with_its_error_and_other_errors_propagate() -> None:
    [p] = planned({"fault": "pause", "id": "p", "at": 1, "duration": 2})

    def boom() -> None:
        raise KeyError("no such unit")

    ops, err = _ops(Heal(p, why="teardown"), boom, errors=(KeyError,))
    assert err == "'no such unit'"
    assert [(o.outcome, o.evidence, o.error) for o in ops] == [
        ("invoke", {"why": "teardown"}, ""),
        ("fail", {}, "'no such unit'"),
    ]
    with pytest.raises(KeyError):
        _ops(Heal(p), boom)  # not one of the step's errors: a bug, not a failed step


def test_a_skipped_heal_is_recorded_and_not_acted_on() -> None:
    [p] = planned({"fault": "kill", "id": "k", "at": 1, "duration": 2})

    def restart() -> None:
        raise AssertionError("a skipped heal must not run")

    ops, err = _ops(Heal(p, RUN_FINISHED, skip=True), restart)
    assert err is None and [(o.outcome, o.evidence) for o in ops] == [
        ("invoke", {"why": RUN_FINISHED}),
        ("ok", SKIPPED),
    ]


@pytest.mark.parametrize("driver", ["chaos/controller.py", "chaos/sim/runner.py"])
def test_both_drivers_record_fault_steps_through_carry_out_only(driver: str) -> None:
    """The controller and deterministic mode record fault steps with one builder; neither makes FaultOps itself
    (the copies they had differed in what a skipped or failed step recorded)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / driver).read_text())
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "carry_out" in called and "FaultOp" not in called
