"""Hypothesis strategies for fault schedules (public API).

A generated :class:`FaultSchedule` is a list of faults with start and duration
in *outer-step units* (one outer step = H inner steps), so the same schedule
means the same thing for a fast simulated learner and a slow real one.
:func:`to_scenario` turns it into an ordinary scenario (seconds after the
first merge) that ``diloco-chaos run``/``replay`` and :func:`chaos.sim.simulate`
accept.

Bounds a user can set: which fault kinds, how many faults, the horizon and
the longest duration, and ``max_down`` — at most this many learners taken
out of training at any moment (default M − K: a schedule that never takes
the run below its minimum quorum is *admissible*, and Decoupled DiLoCo
claims liveness for every admissible schedule). Faults may overlap.

Example:
    >>> from hypothesis import given, settings
    >>> from chaos.scenario import parse_scenario
    >>> base = parse_scenario({"name": "base", "cluster": {"token_budget": 100000}})
    >>> @settings(max_examples=5, database=None)
    ... @given(fault_schedules(learners=3, max_faults=2, max_down=1))
    ... def check(schedule):
    ...     assert max_down_at_once(schedule) <= 1
    ...     assert len(to_scenario(base, schedule, outer_step_s=0.24).schedule) == len(schedule.faults)
    >>> check()
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from chaos.scenario import Scenario, parse_scenario
from faults.base import SYNCER
from faults.injectors import INJECTORS, params_of
from faults.kinds import LOCAL_KINDS, removed_learners, syncer_only

__all__ = [
    "GeneratedFault",
    "FaultSchedule",
    "fault_schedules",
    "max_down_at_once",
    "to_scenario",
    "outer_step_seconds",
]


@dataclass(frozen=True)
class GeneratedFault:
    """One fault; ``start`` and ``duration`` in outer steps after the first merge."""

    kind: str
    targets: tuple[str, ...]
    start: float
    duration: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.duration

    def removes(self) -> tuple[str, ...]:
        """The learners this fault keeps from contributing while it lasts."""
        return removed_learners(self.kind, self.targets, self.params)

    def spec(self, outer_step_s: float) -> dict[str, Any]:
        """The scenario entry, times converted to seconds."""
        out: dict[str, Any] = {
            "fault": self.kind,
            "at": round(self.start * outer_step_s, 3),
            "duration": round(self.duration * outer_step_s, 3),
            **self.params,
        }
        if not syncer_only(self.kind):
            out["targets"] = list(self.targets)
        return out


@dataclass(frozen=True)
class FaultSchedule:
    faults: tuple[GeneratedFault, ...]

    def __len__(self) -> int:
        return len(self.faults)

    def describe(self) -> str:
        return (
            "; ".join(f"{f.kind} {','.join(f.targets)} @{f.start:g}+{f.duration:g}" for f in self.faults) or "none"
        )


def max_down_at_once(schedule: FaultSchedule) -> int:
    """The most learners taken out of training at the same moment."""
    points = sorted({f.start for f in schedule.faults})
    worst = 0
    for t in points:
        down = {lid for f in schedule.faults if f.start <= t < f.end for lid in f.removes()}
        worst = max(worst, len(down))
    return worst


def _learner_ids(learners: int | Sequence[str]) -> list[str]:
    return [f"learner-{i}" for i in range(learners)] if isinstance(learners, int) else list(learners)


@st.composite
def fault_schedules(
    draw: Any,
    *,
    learners: int | Sequence[str] = 3,
    kinds: Collection[str] = LOCAL_KINDS,
    max_faults: int = 4,
    min_faults: int = 1,
    horizon: float = 40.0,
    max_duration: float = 20.0,
    max_down: int | None = None,
    min_quorum: int = 1,
) -> FaultSchedule:
    """Schedules of ``min_faults``..``max_faults`` faults of ``kinds`` on ``learners``.

    Starts fall in [0, horizon) outer steps, durations in [1, max_duration].
    ``max_down`` bounds the learners out at once (default ``M - min_quorum``:
    admissible schedules only); a removing fault that would exceed it gets
    fewer targets, or none, in which case it is dropped. Shrinks towards fewer,
    earlier, shorter faults on the first learners.
    """
    ids = _learner_ids(learners)
    limit = len(ids) - min_quorum if max_down is None else max_down
    if not kinds:
        raise ValueError("fault_schedules: kinds is empty")
    faults: list[GeneratedFault] = []
    n = draw(st.integers(min_faults, max_faults))
    for _ in range(n):
        kind = draw(st.sampled_from(list(kinds)))
        start = float(draw(st.integers(0, max(int(horizon) - 1, 0))))
        duration = float(draw(st.integers(1, max(int(max_duration), 1))))
        # the example values its injector declares (faults.params)
        params = params_of(INJECTORS[kind]).example(lambda options: draw(st.sampled_from(options)))
        if syncer_only(kind):
            faults.append(GeneratedFault(kind, (SYNCER,), start, duration, params))
            continue
        count = draw(st.integers(1, len(ids)))
        pool = list(ids)
        targets: list[str] = []
        for _ in range(count):
            targets.append(pool.pop(draw(st.integers(0, len(pool) - 1))))
        candidate = GeneratedFault(kind, tuple(sorted(targets)), start, duration, params)
        if candidate.removes():
            # Keep the schedule admissible: drop targets until at most `limit` learners are out at once.
            while candidate.targets and max_down_at_once(FaultSchedule((*faults, candidate))) > limit:
                candidate = GeneratedFault(kind, candidate.targets[:-1], start, duration, params)
            if not candidate.targets:
                continue
        faults.append(candidate)
    return FaultSchedule(tuple(faults))


def to_scenario(
    template: Scenario,
    schedule: FaultSchedule,
    outer_step_s: float,
    name: str | None = None,
    description: str | None = None,
) -> Scenario:
    """``template`` with its schedule replaced by ``schedule`` (seconds = outer steps × ``outer_step_s``)."""
    tree = template.model_dump(mode="json", exclude_none=True)
    tree["schedule"] = [f.spec(outer_step_s) for f in schedule.faults]
    tree.pop("random", None)
    if name:
        tree["name"] = name
    if description is not None:
        tree["description"] = description
    return parse_scenario(tree, f"{template.name} (generated schedule)")


def outer_step_seconds(scenario: Scenario, step_time_s: float) -> float:
    """Seconds per outer step for a learner taking ``step_time_s`` per inner step."""
    return scenario.cluster.algorithm.sync_every * step_time_s
