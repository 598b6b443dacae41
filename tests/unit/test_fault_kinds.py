"""One table of fault kinds (faults.kinds): every kind has a scenario entry and an injector, and what other modules
ask of a kind is read from the table (the drifts it replaced: data_limit missing from the generated schedules'
kinds, disconnect drawn as a process fault)."""

from __future__ import annotations

import typing

import pytest

from chaos.fault_plan import plan
from chaos.scenario import FaultSpec, ScenarioError, parse_scenario
from chaos.sim.effects import EFFECTS
from chaos.timeline import fault_family
from faults.base import SYNCER
from faults.injectors import INJECTORS, params_of
from faults.kinds import CONTAINER_KINDS, KINDS, LOCAL_KINDS, removed_learners, stops_training

REQUIRED = {"bandwidth": {"rate_kbps": 100}, "latency": {"latency_ms": 10}, "data_limit": {"bytes": 500}}


def scenario_with_fault(kind: str, targets: list[str] | None = None, **params):
    fault = {"fault": kind, "at": 1, "duration": 1, **REQUIRED.get(kind, {}), **params}
    if targets is not None:
        fault["targets"] = targets
    return parse_scenario(
        {"name": f"one-{kind}", "cluster": {"algorithm": {"num_learners": 2}}, "schedule": [fault]}
    )


def test_the_scenario_schema_has_one_entry_per_kind() -> None:
    members = typing.get_args(typing.get_args(FaultSpec)[0])
    tags = {typing.get_args(m.model_fields["fault"].annotation)[0] for m in members}
    assert tags == set(KINDS)


def test_every_kind_has_one_injector_and_one_deterministic_effect() -> None:
    assert set(INJECTORS) == set(KINDS) == set(EFFECTS)
    # deterministic mode plays a kind on the syncer only where the table lets it target the syncer
    assert all(KINDS[k].on_syncer for k, e in EFFECTS.items() if e.syncer is not None)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_builds_its_own_injector(kind: str) -> None:
    (planned,) = plan(scenario_with_fault(kind))
    assert planned.build().kind == kind


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"syncer_crash"}))
def test_a_kind_may_target_the_syncer_exactly_when_the_table_says_so(kind: str) -> None:
    if KINDS[kind].on_syncer:
        assert plan(scenario_with_fault(kind, [SYNCER]))[0].targets == (SYNCER,)
    else:
        with pytest.raises(ScenarioError, match="unknown"):
            scenario_with_fault(kind, [SYNCER])


def test_the_old_drifts_are_gone() -> None:
    assert "data_limit" in LOCAL_KINDS and not CONTAINER_KINDS & set(LOCAL_KINDS)
    assert CONTAINER_KINDS == {"cpu_limit", "disconnect"}
    assert fault_family("disconnect") == "network" and fault_family("cpu_limit") == "process"


def test_who_a_fault_takes_out() -> None:
    assert removed_learners("partition", ("learner-0",), {"direction": "from_syncer"}) == ()
    assert removed_learners("partition", ("learner-0",), {"direction": "to_syncer"}) == ("learner-0",)
    assert removed_learners("pause", ("learner-0", SYNCER), {}) == ("learner-0",)
    assert removed_learners("latency", ("learner-0",), {}) == ()
    assert removed_learners("no-such-kind", ("learner-0",), {}) == ()  # an older history's kind: no claim
    assert stops_training("syncer_crash", (SYNCER,)) and stops_training("pause", (SYNCER,))
    assert not stops_training("pause", ("learner-0",)) and not stops_training("slow", (SYNCER,))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_example_values_its_injector_declares_make_a_valid_entry(kind: str) -> None:
    for pick in (lambda options: options[0], lambda options: options[-1]):
        example = params_of(INJECTORS[kind]).example(pick)
        assert set(example) <= set(params_of(INJECTORS[kind]).model_fields)
        assert plan(scenario_with_fault(kind, **example))[0].params.items() >= example.items()
