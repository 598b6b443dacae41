"""chaos.scenario and chaos.fault_plan: built-ins load, malformed files fail with file + field, plans are replayable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.errors import ScenarioError
from chaos.fault_plan import Planned, plan
from chaos.scenario import builtin_scenarios, load_scenario, parse_scenario, resolve
from faults import network, process
from faults.base import SYNCER, Fault

LEARNERS = ["learner-0", "learner-1", "learner-2"]


def _write(tmp_path: Path, data: Any, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _error(tmp_path: Path, data: Any) -> str:
    """Load ``data`` as a scenario file; return the ScenarioError's message (the test fails if none)."""
    path = _write(tmp_path, data)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert str(path) in msg, f"the message does not name the file: {msg}"
    return msg


def _scenario(*schedule: dict, seed: int = 0, **extra: Any):
    return parse_scenario({"name": "t", "seed": seed, "schedule": list(schedule), **extra})


def _kill(**kw: Any) -> dict:
    return {"fault": "kill", "targets": ["learner-1"], "at": 1, "duration": 2, **kw}


# ---- built-ins -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_loads_and_plans_faults_on_known_targets(name: str) -> None:
    path = builtin_scenarios()[name]
    assert resolve(name) == path
    scenario = load_scenario(path)
    assert scenario.name == name
    faults = plan(scenario)
    assert faults, f"{name} plans no fault"
    known = set(scenario.learner_ids()) | {SYNCER}
    for p in faults:
        assert p.targets, p
        assert set(p.targets) <= known, (p.fault_id, p.targets)
        assert p.at is not None or p.at_merge is not None
        assert p.duration >= 0


def test_there_are_builtin_scenarios() -> None:
    assert len(builtin_scenarios()) >= 5


# ---- validation errors: each names the file and the field ------------------------------------------------------
def test_unknown_fault_kind(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [{"fault": "explode", "at": 1, "duration": 1}]})
    assert "schedule.0" in msg and "explode" in msg


def test_not_valid_yaml_names_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, "name: t\nschedule:\n  - fault: kill\n    at: [1, 2\n    duration: 3\n")
    assert "not valid YAML" in msg
    assert "line 5" in msg


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    msg = _error(tmp_path, "- fault: kill\n- fault: pause\n")
    assert "mapping" in msg and "list" in msg


def test_schedule_entry_without_duration(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(), {"fault": "pause", "at": 3}]})
    assert "schedule.1" in msg and "duration" in msg


def test_schedule_entry_without_start(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [{"fault": "pause", "duration": 3}]})
    assert "schedule.0" in msg and "'at'" in msg and "at_merge" in msg


def test_both_at_and_at_merge(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(at_merge=4)]})
    assert "schedule.0" in msg and "not both" in msg


def test_unknown_target_lists_the_known_learners(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(targets=["learner-7"])]})
    assert "schedule.0.targets" in msg and "learner-7" in msg
    for lid in LEARNERS:
        assert lid in msg


def test_duplicate_fault_ids(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(id="dup"), _kill(id="dup", at=5), _kill(id="other")]})
    assert "unique" in msg and "dup" in msg and "other" not in msg


def test_repeat_duration_must_be_shorter_than_every(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(duration=4, repeat={"count": 3, "every": 4})]})
    assert "schedule.0" in msg and "repeat.every" in msg


def test_repeat_needs_at_not_at_merge(tmp_path: Path) -> None:
    spec = {
        "fault": "pause",
        "targets": ["learner-0"],
        "at_merge": 3,
        "duration": 1,
        "repeat": {"count": 2, "every": 5},
    }
    msg = _error(tmp_path, {"name": "t", "schedule": [spec]})
    assert "schedule.0" in msg and "repeat" in msg and "at_merge" in msg


def _random(**kw: Any) -> dict:
    return {"count": 2, "window": [1, 10], "duration": [1, 2], "faults": [{"fault": "pause"}], **kw}


def test_random_template_takes_no_at(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "random": _random(faults=[{"fault": "pause", "at": 3}])})
    assert "random" in msg and "faults.0" in msg and "at" in msg


def test_random_window_low_above_high(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "random": _random(window=[8, 2])})
    assert "random" in msg and "window" in msg and "[8.0, 2.0]" in msg


def test_jitter_above_latency(tmp_path: Path) -> None:
    spec = {"fault": "latency", "latency_ms": 10, "jitter_ms": 20, "at": 1, "duration": 1}
    msg = _error(tmp_path, {"name": "t", "schedule": [spec]})
    assert "schedule.0" in msg and "jitter_ms" in msg and "latency_ms" in msg


def test_unknown_extra_key(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "schedule": [_kill(bogus=1)]})
    assert "schedule.0.bogus" in msg


def test_bad_cluster_value(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"name": "t", "cluster": {"algorithm": {"num_learners": 2, "min_quorum": 3}}})
    assert "cluster.algorithm" in msg and "min_quorum" in msg


def test_syncer_crash_with_learner_targets(tmp_path: Path) -> None:
    spec = {"fault": "syncer_crash", "targets": ["learner-0"], "at": 1, "duration": 1}
    msg = _error(tmp_path, {"name": "t", "schedule": [spec]})
    assert "schedule.0.targets" in msg and "syncer" in msg


def test_missing_file_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(ScenarioError, match="cannot read") as info:
        load_scenario(path)
    assert str(path) in str(info.value)


def test_resolve_unknown_name_lists_builtins() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve("no-such-scenario")
    msg = str(info.value)
    assert "no-such-scenario" in msg
    for name in builtin_scenarios():
        assert name in msg


def test_a_valid_file_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, {"name": "ok", "schedule": [_kill()]}, "ok.yaml")
    assert load_scenario(path).schedule[0].fault == "kill"


# ---- schedules -------------------------------------------------------------------------------------------------
def test_plan_is_deterministic() -> None:
    data = {
        "name": "t",
        "seed": 5,
        "schedule": [
            _kill(targets={"random": 2}),
            {
                "fault": "pause",
                "targets": {"random": 1},
                "at": 4,
                "duration": 1,
                "repeat": {"count": 3, "every": 2},
            },
        ],
        "random": _random(count=6, min_gap_s=0.5),
    }
    first = [p.record() for p in plan(parse_scenario(data))]
    again = [p.record() for p in plan(parse_scenario(data))]
    assert first == again
    assert len(first) == 1 + 3 + 6


def test_random_targets_depend_on_seed_and_are_distinct_learners() -> None:
    drawn = {}
    for seed in range(20):
        (p,) = plan(_scenario(_kill(targets={"random": 2}), seed=seed))
        assert len(p.targets) == 2 and len(set(p.targets)) == 2
        assert set(p.targets) <= set(LEARNERS)
        drawn[seed] = p.targets
    assert len(set(drawn.values())) > 1, "every seed drew the same targets"
    # and the same seed draws the same targets
    assert plan(_scenario(_kill(targets={"random": 2}), seed=3))[0].targets == drawn[3]


def test_all_targets_every_learner() -> None:
    (p,) = plan(_scenario({"fault": "partition", "targets": "all", "at": 0, "duration": 1}))
    assert p.targets == tuple(LEARNERS)


def test_repeat_expands_into_spaced_faults() -> None:
    spec = {
        "fault": "partition",
        "id": "flap",
        "targets": ["learner-0"],
        "at": 2,
        "duration": 1.5,
        "repeat": {"count": 4, "every": 3.5},
    }
    faults = plan(_scenario(spec))
    assert [p.fault_id for p in faults] == ["flap.0", "flap.1", "flap.2", "flap.3"]
    assert [p.at for p in faults] == [2.0, 5.5, 9.0, 12.5]
    assert all(p.duration == 1.5 and p.targets == ("learner-0",) and p.kind == "partition" for p in faults)


def test_repeat_without_id_uses_the_index() -> None:
    faults = plan(_scenario(_kill(), _kill(at=10, repeat={"count": 2, "every": 5})))
    assert [p.fault_id for p in faults] == ["f0", "f1.0", "f1.1"]


def _at(p: Planned) -> float:
    """A random schedule's fault starts at a time in seconds (not at a merge count)."""
    assert p.at is not None, p
    return p.at


def test_random_schedule_within_window_and_bounds_sorted() -> None:
    faults = plan(
        parse_scenario({"name": "t", "seed": 9, "random": _random(count=12, window=[3, 40], duration=[1, 4])})
    )
    assert len(faults) == 12
    starts = [_at(p) for p in faults]
    assert starts == sorted(starts)
    assert all(3 <= _at(p) <= 40 for p in faults)
    assert all(1 <= p.duration <= 4 for p in faults)
    assert all(p.at_merge is None for p in faults)
    assert [p.fault_id for p in faults] == [f"r{j}" for j in range(12)]


def test_random_schedule_with_min_gap_never_overlaps() -> None:
    faults = plan(
        parse_scenario(
            {"name": "t", "seed": 2, "random": _random(count=8, window=[0, 10], duration=[1, 3], min_gap_s=1)}
        )
    )
    assert len(faults) == 8
    for prev, nxt in zip(faults, faults[1:]):
        assert _at(nxt) >= _at(prev) + prev.duration + 1 - 0.1, (prev, nxt)


def test_random_template_id_prefixes_fault_ids() -> None:
    faults = plan(
        parse_scenario({"name": "t", "random": _random(count=3, faults=[{"fault": "pause", "id": "p"}])})
    )
    assert [p.fault_id for p in faults] == ["p.r0", "p.r1", "p.r2"]


@pytest.mark.parametrize(
    "data",
    [
        # an explicit id equal to another fault's default id f<index>
        {"name": "t", "schedule": [_kill(id="f1"), _kill(targets=["learner-2"], at=3)]},
        # an explicit id equal to a random fault's default id r<j>
        {"name": "t", "schedule": [_kill(id="r0")], "random": _random(count=1)},
    ],
    ids=["default-f-index", "default-r-index"],
)
def test_planned_fault_ids_clashing_with_generated_ones_are_rejected(data: dict) -> None:
    """The controller keys active faults (and Toxiproxy toxic names, and history fault windows) by fault id:
    two planned faults with one id would shadow each other's heal, so planning refuses them by name."""
    with pytest.raises(ScenarioError, match="used twice"):
        plan(parse_scenario(data))


def test_build_returns_the_matching_fault_object() -> None:
    faults = plan(
        _scenario(
            _kill(restart=False),
            {
                "fault": "partition",
                "targets": ["learner-0", "learner-2"],
                "at": 3,
                "duration": 1,
                "direction": "to_syncer",
            },
            {"fault": "syncer_crash", "at": 5, "duration": 2},
            {"fault": "bandwidth", "targets": "all", "rate_kbps": 250, "at": 6, "duration": 2},
        )
    )
    kill, part, crash, bw = (p.build() for p in faults)
    assert isinstance(kill, process.Kill) and kill.kind == "kill" and kill.restart is False
    assert isinstance(part, network.Partition) and part.kind == "partition" and part.direction == "to_syncer"
    assert isinstance(crash, process.SyncerCrash) and crash.targets == (SYNCER,)
    assert isinstance(bw, network.Bandwidth) and bw.rate_kbps == 250
    built_faults: tuple[Fault, ...] = (kill, part, crash, bw)
    for p, built in zip(faults, built_faults):
        assert built.kind == p.kind
        assert built.fault_id == p.fault_id
        assert tuple(built.targets) == p.targets


def test_to_json_round_trips_the_params() -> None:
    spec = {
        "fault": "bandwidth",
        "id": "bw",
        "targets": ["learner-1"],
        "rate_kbps": 123,
        "direction": "from_syncer",
        "at": 2.5,
        "duration": 4,
    }
    (p,) = plan(_scenario(spec))
    data = json.loads(json.dumps(p.record().model_dump(mode="json")))
    assert data == {
        "fault_id": "bw",
        "kind": "bandwidth",
        "targets": ["learner-1"],
        "at": 2.5,
        "at_merge": None,
        "duration": 4.0,
        "params": {"rate_kbps": 123, "direction": "from_syncer"},
    }
    # the params rebuild the same spec
    rebuilt = _scenario(
        {
            "fault": data["kind"],
            "id": data["fault_id"],
            "targets": data["targets"],
            "at": data["at"],
            "duration": data["duration"],
            **data["params"],
        }
    ).schedule[0]
    assert rebuilt == p.spec


# ---- property: random schedules with a min gap never overlap and are replayable --------------------------------
@st.composite
def _random_schedules(draw: st.DrawFn) -> dict:
    lo = draw(st.floats(0, 100, allow_nan=False))
    hi = lo + draw(st.floats(0, 100, allow_nan=False))
    dlo = draw(st.floats(0, 20, allow_nan=False))
    dhi = dlo + draw(st.floats(0, 20, allow_nan=False))
    return {
        "count": draw(st.integers(1, 20)),
        "window": [lo, hi],
        "duration": [dlo, dhi],
        "min_gap_s": draw(st.floats(0.01, 10, allow_nan=False)),
        "faults": [{"fault": "pause", "targets": {"random": 1}}, {"fault": "partition"}],
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random=_random_schedules(), seed=st.integers(0, 2**32))
def test_random_schedule_property(random: dict, seed: int) -> None:
    data = {"name": "t", "seed": seed, "random": random}
    faults = plan(parse_scenario(data))
    assert [p.record() for p in faults] == [p.record() for p in plan(parse_scenario(data))]
    assert len(faults) == random["count"]
    lo, _ = random["window"]
    dlo, dhi = random["duration"]
    gap = random["min_gap_s"]
    for p in faults:
        assert _at(p) >= lo - 0.05 - 1e-9  # drawn starts are rounded to 0.1 s
        assert dlo - 0.05 - 1e-9 <= p.duration <= dhi + 0.05 + 1e-9
    for prev, nxt in zip(faults, faults[1:]):
        assert _at(nxt) >= _at(prev) + prev.duration - 1e-9, ("overlap", prev.record(), nxt.record())
        assert _at(nxt) >= _at(prev) + prev.duration + gap - 0.1, (prev.record(), nxt.record())
