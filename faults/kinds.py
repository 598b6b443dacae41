"""Every fault kind and what it does to a run: one frozen record per kind, the only list of kinds.

Whatever asks "which kinds ..." (which may target the syncer, which take a
learner out of training, which need containers, whose heal restarts a unit
and so is skipped once the run has finished, which deterministic mode and the
generated schedules can play) reads it from :data:`KINDS`; how a kind is
injected (:mod:`chaos.schedules`), what its scenario entry holds
(:mod:`chaos.scenario`) and how deterministic mode plays it
(:mod:`chaos.sim.effects`) are each one entry keyed by its name, and a test
checks that every kind has all three.

Example:
    >>> KINDS["disconnect"].family, KINDS["disconnect"].containers, KINDS["disconnect"].removes_learner
    ('network', True, True)
    >>> sorted(k for k, v in KINDS.items() if v.restarts)
    ['corrupt', 'kill', 'stop', 'syncer_crash']
    >>> removed_learners("partition", ("learner-0", "syncer"), {"direction": "from_syncer"})
    ()
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from faults.base import SYNCER

Family = Literal["process", "network"]


@dataclass(frozen=True)
class FaultKind:
    """What one kind of fault does, as far as anything outside its injector needs to know."""

    name: str
    family: Family  # what it acts on: a unit's process (or container's CPU) / its link to the syncer
    removes_learner: bool  # keeps a targeted learner from contributing while it lasts
    on_syncer: bool = False  # may target the syncer (then, if it also stops_syncer, all training waits)
    stops_syncer: bool = False  # on the syncer: nothing merges until it is back
    restarts: bool = False  # its heal starts a new process, so it is skipped once the run has finished
    containers: bool = False  # needs the container backend (Docker API), not local processes
    one_way_spares: bool = False  # direction from_syncer still delivers uploads: the learner keeps contributing

    @property
    def local(self) -> bool:
        """Runs on local processes and in deterministic mode (generated schedules draw from these)."""
        return not self.containers


KINDS: Mapping[str, FaultKind] = {k.name: k for k in (
    FaultKind("kill", "process", removes_learner=True, on_syncer=True, stops_syncer=True, restarts=True),
    FaultKind("stop", "process", removes_learner=True, on_syncer=True, stops_syncer=True, restarts=True),
    FaultKind("pause", "process", removes_learner=True, on_syncer=True, stops_syncer=True),
    FaultKind("slow", "process", removes_learner=False, on_syncer=True),
    FaultKind("syncer_crash", "process", removes_learner=False, on_syncer=True, stops_syncer=True, restarts=True),
    FaultKind("corrupt", "process", removes_learner=True, restarts=True),
    FaultKind("partition", "network", removes_learner=True, one_way_spares=True),
    FaultKind("link_down", "network", removes_learner=True),
    FaultKind("bandwidth", "network", removes_learner=False),
    FaultKind("latency", "network", removes_learner=False),
    FaultKind("reset_peer", "network", removes_learner=True),
    FaultKind("data_limit", "network", removes_learner=True, one_way_spares=True),
    FaultKind("cpu_limit", "process", removes_learner=False, on_syncer=True, containers=True),
    FaultKind("disconnect", "network", removes_learner=True, on_syncer=True, stops_syncer=True, containers=True),
)}

FAULT_KINDS: tuple[str, ...] = tuple(KINDS)
LOCAL_KINDS: tuple[str, ...] = tuple(k for k, v in KINDS.items() if v.local)
CONTAINER_KINDS: frozenset[str] = frozenset(k for k, v in KINDS.items() if v.containers)


def removes(name: str, params: Mapping[str, Any]) -> bool:
    """Whether a fault of kind ``name`` with ``params`` keeps its target learners from contributing (False for a
    kind this version does not know, e.g. in an older run's history)."""
    k = KINDS.get(name)
    return k is not None and k.removes_learner and not (k.one_way_spares and params.get("direction") == "from_syncer")


def removed_learners(name: str, targets: tuple[str, ...] | list[str], params: Mapping[str, Any]) -> tuple[str, ...]:
    """The learners a fault of kind ``name`` keeps from contributing while it lasts (the syncer is not one)."""
    return tuple(t for t in targets if t != SYNCER) if removes(name, params) else ()


def stops_training(name: str, targets: tuple[str, ...] | list[str]) -> bool:
    """Whether a fault takes the syncer down, so that no learner's work merges until it is back."""
    k = KINDS.get(name)
    return k is not None and (k.name == "syncer_crash" or (k.stops_syncer and SYNCER in targets))
