"""The fault plan: a scenario's fault schedule (fixed and seeded-random specs) made concrete and replayable.

The plan is a pure function of the scenario (its ``seed`` included): the same
file always yields the same faults, targets and times, and the plan is written
into the run's history so a run can be replayed from its artifacts.

Example:
    >>> from chaos.scenario import parse_scenario
    >>> s = parse_scenario({"name": "x", "seed": 3, "schedule": [
    ...     {"fault": "pause", "targets": {"random": 1}, "at": 2, "duration": 1,
    ...      "repeat": {"count": 2, "every": 5}}]})
    >>> [(p.fault_id, p.at, p.duration) for p in plan(s)]
    [('f0.0', 2.0, 1.0), ('f0.1', 7.0, 1.0)]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from chaos.errors import ScenarioError
from chaos.history import PlannedFault
from chaos.records import JsonObject
from chaos.scenario import FaultSpec, RandomTargets, Scenario
from faults.base import SYNCER, Fault
from faults.injectors import build
from faults.kinds import syncer_only


@dataclass(frozen=True)
class Planned:
    """One fault of the plan: what, on whom, when (seconds after steady state or a merge count), how long."""

    fault_id: str
    spec: FaultSpec
    targets: tuple[str, ...]
    at: float | None
    at_merge: int | None
    duration: float

    @property
    def kind(self) -> str:
        return self.spec.fault

    def build(self) -> Fault:
        return build_fault(self.spec, self.fault_id, self.targets)

    @property
    def params(self) -> JsonObject:
        """The spec's own settings as JSON (what the history records with each step of the fault)."""
        return fault_params(self.spec, mode="json")

    def record(self) -> PlannedFault:
        """This fault as the plan record writes it (replay reads it back)."""
        return PlannedFault(
            fault_id=self.fault_id,
            kind=self.kind,
            targets=list(self.targets),
            at=self.at,
            at_merge=self.at_merge,
            duration=self.duration,
            params=self.params,
        )


def build_fault(spec: FaultSpec, fault_id: str, targets: tuple[str, ...]) -> Fault:
    """The injector object for one spec (:mod:`faults.injectors`)."""
    return build(spec.fault, fault_id, (SYNCER,) if syncer_only(spec.fault) else targets, fault_params(spec))


def fault_params(spec: FaultSpec, mode: str = "python") -> dict[str, object]:
    """A spec's own parameters: everything but its kind, id, targets and timing."""
    return spec.model_dump(mode=mode, exclude={"id", "targets", "at", "at_merge", "duration", "repeat", "fault"})


def _targets(spec: FaultSpec, learners: list[str], rng: random.Random) -> tuple[str, ...]:
    t = spec.targets
    if syncer_only(spec.fault):
        return (SYNCER,)
    if t == "all":
        return tuple(learners)
    if isinstance(t, RandomTargets):
        return tuple(sorted(rng.sample(learners, t.random)))
    return tuple(t)


def plan(scenario: Scenario) -> list[Planned]:
    """Every fault of the scenario, fixed ones first then random ones, each with concrete targets and times."""
    rng = random.Random(scenario.seed)
    learners = scenario.learner_ids()
    out: list[Planned] = []
    for i, spec in enumerate(scenario.schedule):
        fid = spec.id or f"f{i}"
        assert spec.duration is not None  # the scenario validator requires it
        if spec.repeat is None:
            out.append(Planned(fid, spec, _targets(spec, learners, rng), spec.at, spec.at_merge, spec.duration))
            continue
        assert spec.at is not None  # the scenario validator requires seconds for repeats
        for k in range(spec.repeat.count):
            out.append(
                Planned(
                    f"{fid}.{k}",
                    spec,
                    _targets(spec, learners, rng),
                    round(spec.at + k * spec.repeat.every, 3),
                    None,
                    spec.duration,
                )
            )
    if scenario.random is not None:
        r = scenario.random
        drawn = []
        for _ in range(r.count):
            template = rng.choice(r.faults)
            drawn.append(
                (
                    round(rng.uniform(*r.window), 1),
                    round(rng.uniform(*r.duration), 1),
                    template,
                    _targets(template, learners, rng),
                )
            )
        drawn.sort(key=lambda d: d[0])
        end = -float("inf")
        for j, (at, dur, template, targets) in enumerate(drawn):
            at = max(at, round(end + r.min_gap_s, 1)) if r.min_gap_s > 0 else at
            end = at + dur
            out.append(Planned(template.id and f"{template.id}.r{j}" or f"r{j}", template, targets, at, None, dur))
    ids = [p.fault_id for p in out]
    clash = sorted({i for i in ids if ids.count(i) > 1})
    if clash:
        raise ScenarioError(
            f"scenario {scenario.name}: fault id(s) {clash} are used twice (a given id equals a "
            "generated one: f<index>, r<index>); give those faults other ids"
        )
    return out
