"""Every fault kind and what it does to a run: one frozen record per kind, the only list of kinds.

Whatever asks "which kinds ..." (which may target the syncer, which take a
learner out of training, which need containers, whose heal restarts a unit
and so is skipped once the run has finished, which deterministic mode and the
generated schedules can play) reads it from :data:`KINDS`. A kind is three
entries keyed by its name, and adding one touches these and nothing else:

- its record here;
- its injector (:data:`faults.injectors.INJECTORS`), which also declares the
  scenario entry's parameters, their validation and example values as its
  ``Params`` (:mod:`faults.params`; :mod:`chaos.scenario` and
  :mod:`chaos.strategies` derive from it);
- its deterministic effect (:data:`chaos.sim.effects.EFFECTS`).

A test checks that every kind has all three; :mod:`chaos.registry` adds a kind
at run time (a plugin, a test), and docs/scenarios-and-checks.md ("Adding a
fault kind") works through an example. The name sets below are live views, so
they follow the table wherever they were imported.

Example:
    >>> KINDS["disconnect"].family, KINDS["disconnect"].containers, KINDS["disconnect"].removes_learner
    ('network', True, True)
    >>> sorted(k for k, v in KINDS.items() if v.restarts)
    ['corrupt', 'kill', 'stop', 'syncer_crash']
    >>> removed_learners("partition", ("learner-0", "syncer"), {"direction": "from_syncer"})
    ()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

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
    syncer_only: bool = False  # targets the syncer alone (its scenario entry's targets are ['syncer'])

    @property
    def local(self) -> bool:
        """Runs on local processes and in deterministic mode (generated schedules draw from these)."""
        return not self.containers


KINDS: Mapping[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind("kill", "process", removes_learner=True, on_syncer=True, stops_syncer=True, restarts=True),
        FaultKind("stop", "process", removes_learner=True, on_syncer=True, stops_syncer=True, restarts=True),
        FaultKind("pause", "process", removes_learner=True, on_syncer=True, stops_syncer=True),
        FaultKind("slow", "process", removes_learner=False, on_syncer=True),
        FaultKind(
            "syncer_crash",
            "process",
            removes_learner=False,
            on_syncer=True,
            stops_syncer=True,
            restarts=True,
            syncer_only=True,
        ),
        FaultKind("corrupt", "process", removes_learner=True, restarts=True),
        FaultKind("partition", "network", removes_learner=True, one_way_spares=True),
        FaultKind("link_down", "network", removes_learner=True),
        FaultKind("bandwidth", "network", removes_learner=False),
        FaultKind("latency", "network", removes_learner=False),
        FaultKind("reset_peer", "network", removes_learner=True),
        FaultKind("data_limit", "network", removes_learner=True, one_way_spares=True),
        FaultKind("cpu_limit", "process", removes_learner=False, on_syncer=True, containers=True),
        FaultKind(
            "disconnect", "network", removes_learner=True, on_syncer=True, stops_syncer=True, containers=True
        ),
    )
}


_S = TypeVar("_S")


class KindNames(AbstractSet[str]):
    """The names of the kinds that pass ``test``, in table order, read from :data:`KINDS` on every use: a module
    that imported the view still sees a kind registered later (:mod:`chaos.registry`).

    >>> "data_limit" in LOCAL_KINDS, sorted(CONTAINER_KINDS & {"kill", "disconnect"})
    (True, ['disconnect'])
    """

    def __init__(self, test: Callable[[FaultKind], bool]) -> None:
        self._test = test

    def __iter__(self) -> Iterator[str]:
        return (name for name, k in KINDS.items() if self._test(k))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        k = KINDS.get(name) if isinstance(name, str) else None
        return k is not None and self._test(k)

    def __repr__(self) -> str:
        return f"KindNames({list(self)})"

    @classmethod
    def _from_iterable(cls, names: Iterable[_S]) -> frozenset[_S]:  # what &, |, - return
        return frozenset(names)


FAULT_KINDS = KindNames(lambda k: True)
LOCAL_KINDS = KindNames(lambda k: k.local)
CONTAINER_KINDS = KindNames(lambda k: k.containers)


def removes(name: str, params: Mapping[str, Any]) -> bool:
    """Whether a fault of kind ``name`` with ``params`` keeps its target learners from contributing (False for a
    kind this version does not know, e.g. in an older run's history)."""
    k = KINDS.get(name)
    return (
        k is not None and k.removes_learner and not (k.one_way_spares and params.get("direction") == "from_syncer")
    )


def removed_learners(
    name: str, targets: tuple[str, ...] | list[str], params: Mapping[str, Any]
) -> tuple[str, ...]:
    """The learners a fault of kind ``name`` keeps from contributing while it lasts (the syncer is not one)."""
    return tuple(t for t in targets if t != SYNCER) if removes(name, params) else ()


def syncer_only(name: str) -> bool:
    """Whether kind ``name`` targets the syncer alone, so its scenario entry need name no targets (False for a
    kind this version does not know)."""
    k = KINDS.get(name)
    return k is not None and k.syncer_only


def stops_training(name: str, targets: tuple[str, ...] | list[str]) -> bool:
    """Whether a fault takes the syncer down, so that no learner's work merges until it is back."""
    k = KINDS.get(name)
    return k is not None and (k.syncer_only or (k.stops_syncer and SYNCER in targets))
