"""Adding a fault kind is its table entry, its injector and its deterministic effect, nothing else: a throwaway
kind registered here (chaos.registry) is in scenario files, plans, deterministic mode, generated schedules and the
timeline like a built-in one, and gone again afterwards. The kind is docs/scenarios-and-checks.md's worked example
("Adding a fault kind"), run from the docs' own code."""

from __future__ import annotations

import re
import signal
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import find, settings

import chaos.scenario
from chaos.fault_plan import plan
from chaos.registry import fault_kind, register_fault_kind, unregister_fault_kind
from chaos.scenario import ScenarioError, parse_scenario
from chaos.sim import SimOptions, simulate
from chaos.sim.effects import EFFECTS, Effect
from chaos.strategies import fault_schedules, to_scenario
from chaos.timeline import fault_family
from faults.injectors import INJECTORS
from faults.kinds import CONTAINER_KINDS, FAULT_KINDS, KINDS, LOCAL_KINDS, FaultKind
from faults.params import FaultParams
from tests.support import FakeCluster
from trainer import events as ev

# ---- the three pieces of a kind: the docs' worked example, run ------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios-and-checks.md"


def worked_example() -> tuple[dict[str, Any], dict[str, Any]]:
    """The code and the schedule entry of the docs' "Adding a fault kind", so the docs show what is tested."""
    text = DOC.read_text()
    section = text[text.index("### Adding a fault kind") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    entry = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert code and entry, f"{DOC.name}: 'Adding a fault kind' needs its python and yaml blocks"
    pieces: dict[str, Any] = {"__name__": "worked_example"}
    exec(compile(code.group(1), f"{DOC.name} (Adding a fault kind)", "exec", dont_inherit=True), pieces)
    return pieces, yaml.safe_load(entry.group(1))["schedule"][0]


PIECES, ENTRY = worked_example()
HICCUP, Hiccup, HICCUP_EFFECT = PIECES["HICCUP"], PIECES["Hiccup"], PIECES["HICCUP_EFFECT"]


@pytest.fixture
def registered() -> Iterator[None]:
    with fault_kind(HICCUP, Hiccup, HICCUP_EFFECT):
        yield


def one_fault(**fault: Any) -> dict[str, Any]:
    """A small run with the docs' schedule entry, some of its fields replaced."""
    return {
        "name": "t",
        "cluster": {"token_budget": 600_000, "syncer": {"checkpoint_every_merges": 10}},
        "schedule": [{**ENTRY, **fault}],
    }


def tables() -> tuple[Any, ...]:
    return (
        dict(KINDS),
        dict(INJECTORS),
        dict(EFFECTS),
        tuple(FAULT_KINDS),
        tuple(LOCAL_KINDS),
        set(CONTAINER_KINDS),
    )


BEFORE = tables()


# ---- where a kind shows up -----------------------------------------------------------------------------------


def test_a_scenario_names_it_with_its_parameters_validated(registered: None) -> None:
    (entry,) = parse_scenario(one_fault()).schedule
    # stall_ms: a field of the entry class made for the kind (chaos.scenario), not of the base the schedule names
    assert (entry.fault, entry.model_dump()["stall_ms"], type(entry).__name__) == ("hiccup", 80, "HiccupSpec")
    tree = one_fault()
    del tree["schedule"][0]["stall_ms"]
    assert parse_scenario(tree).schedule[0].model_dump()["stall_ms"] == 50
    with pytest.raises(ScenarioError, match=r"schedule\.0\.stall_ms: Input should be less than or equal to 90"):
        parse_scenario(one_fault(stall_ms=95))
    with pytest.raises(ScenarioError, match=r"schedule\.0\.rate_kbps"):
        parse_scenario(one_fault(rate_kbps=5))
    with pytest.raises(ScenarioError, match="unknown"):  # the table says it may not target the syncer
        parse_scenario(one_fault(targets=["syncer"]))
    assert "hiccup" in {
        typing.get_args(m.model_fields["fault"].annotation)[0]
        for m in typing.get_args(typing.get_args(chaos.scenario.FaultSpec)[0])
    }


def test_the_plan_builds_its_injector(registered: None) -> None:
    (planned,) = plan(parse_scenario(one_fault(stall_ms=20)))
    fault = planned.build()
    assert isinstance(fault, Hiccup) and fault.stall_ms == 20 and planned.params == {"stall_ms": 20}
    assert fault.describe() == "hiccup learner-1: stopped 20 ms of every 100 ms"
    cluster = FakeCluster(["learner-0", "learner-1"], sent=[])  # just the signals an injector sends
    assert fault.inject(cluster) == {"slowed": ["learner-1"], "fraction": 0.8}
    assert fault.heal(cluster) == {"resumed": ["learner-1"]}
    assert cluster.sent and cluster.sent[-1] == ("learner-1", signal.SIGCONT)


def test_deterministic_mode_plays_its_effect(registered: None) -> None:
    r = simulate(parse_scenario(one_fault(stall_ms=80)), SimOptions(baseline=False))
    (w,) = r.history.fault_windows()
    assert (w.kind, w.injected, w.healed, w.evidence) == (
        "hiccup",
        True,
        True,
        {"simulated": "hiccup", "targets": ["learner-1"]},
    )
    steps = [e for e in r.history.events if isinstance(e, ev.Step) and e.source == "learner-1"]
    end = w.end
    assert end is not None
    before = [s.step_time_s for s in steps if s.ts < w.start]
    during = [s.step_time_s for s in steps if w.start + 0.5 < s.ts < end]
    assert before and during and min(during) > 4 * max(before)  # 80 ms of every 100: five times as long


def test_the_rest_of_the_harness_reads_it_from_the_table(registered: None) -> None:
    assert "hiccup" in FAULT_KINDS and "hiccup" in LOCAL_KINDS and "hiccup" not in CONTAINER_KINDS
    assert fault_family("hiccup") == "process"  # a kind the table does not know would be drawn as "network"


def test_generated_schedules_draw_it(registered: None) -> None:
    template = parse_scenario({"name": "base", "cluster": {"token_budget": 100_000}})
    schedule = find(
        fault_schedules(max_faults=3),
        lambda s: any(f.kind == "hiccup" for f in s.faults),
        settings=settings(database=None, max_examples=500),
    )
    drawn = next(f for f in schedule.faults if f.kind == "hiccup")
    assert drawn.params["stall_ms"] in (20, 80)  # the examples its Params declares
    entry = to_scenario(template, schedule, outer_step_s=0.24).schedule[schedule.faults.index(drawn)]
    assert entry.fault == "hiccup" and entry.model_dump()["stall_ms"] == drawn.params["stall_ms"]


def test_the_kubernetes_export_refuses_it_by_name_until_it_has_a_mapping(registered: None, tmp_path: Path) -> None:
    """A Chaos Mesh mapping is optional for a kind (chaos.k8s.chaos_mesh.MAPPING): without one, `export k8s`
    names the fault and its kind, and writes nothing."""
    from chaos.k8s.export import export

    with pytest.raises(ScenarioError, match=r"fault '.*' \(hiccup\): no Chaos Mesh mapping for this kind") as err:
        export(parse_scenario(one_fault(), "t.yaml"), tmp_path / "out")
    assert "cannot export to Chaos Mesh" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_afterwards_everything_is_as_before() -> None:
    with fault_kind(HICCUP, Hiccup, HICCUP_EFFECT):
        assert tables() != BEFORE
    assert tables() == BEFORE
    with pytest.raises(ScenarioError, match="does not match any of the expected tags"):
        parse_scenario(one_fault())
    unregister_fault_kind("hiccup")  # no longer there: not an error


# ---- what is refused -----------------------------------------------------------------------------------------


class Stray:
    kind = "stray"

    class Params(FaultParams):
        duration: float = 1.0  # every fault's own timing field


@pytest.mark.parametrize(
    ("kind", "injector", "effect", "why"),
    [
        (HICCUP, None, HICCUP_EFFECT, "'hiccup' needs its injector"),
        (HICCUP, Hiccup, None, "'hiccup' needs its deterministic effect"),
        (FaultKind("other", "process", removes_learner=False), Hiccup, HICCUP_EFFECT, "must say kind = 'other'"),
        (HICCUP, Hiccup, Effect(HICCUP_EFFECT.learner, syncer=lambda sim, p, inject: None), "may not target it"),
        (FaultKind("kill", "process", removes_learner=True), Hiccup, HICCUP_EFFECT, "already registered"),
        (FaultKind("Bad name", "process", removes_learner=True), Hiccup, HICCUP_EFFECT, "lower-case"),
    ],
)
def test_a_kind_missing_a_piece_is_refused_and_nothing_changes(
    kind: Any, injector: Any, effect: Any, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        register_fault_kind(kind, injector, effect)
    assert tables() == BEFORE


def test_parameters_that_clash_with_the_timing_are_refused_and_nothing_changes() -> None:
    with pytest.raises(TypeError, match=r"Stray.Params: fields \['duration'\]"):
        register_fault_kind(FaultKind("stray", "process", removes_learner=False), Stray, HICCUP_EFFECT)
    assert tables() == BEFORE


def test_a_built_in_kind_cannot_be_unregistered() -> None:
    with pytest.raises(ValueError, match="'kill' is built in"):
        unregister_fault_kind("kill")
    assert tables() == BEFORE
