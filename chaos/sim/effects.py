"""How deterministic mode plays each fault kind: one entry per kind of :data:`faults.kinds.KINDS`.

An :class:`Effect` says what injecting (and healing) a kind does to a
simulated learner and, where the kind may target the syncer, to the simulated
syncer; the simulation (:class:`SimCluster`) is what it acts on, as
:class:`faults.base.Cluster` is for the real injectors. A kind the simulation
does not model on the syncer has ``syncer=None``: the run's evidence notes it.

Example:
    >>> EFFECTS["slow"].syncer is None, EFFECTS["syncer_crash"].learner is None
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chaos.fault_plan import Planned
    from chaos.sim.learner_node import LearnerNode
    from chaos.sim.network import Link
    from chaos.sim.syncer_node import SyncerNode


class SimCluster(Protocol):
    """What an effect acts on (:class:`chaos.sim.runner.Simulation`)."""

    learners: dict[str, LearnerNode]
    syncer: SyncerNode
    links: dict[str, Link]

    def reset_link(self, lid: str) -> None:
        """Every call in flight on the learner's link fails now."""
        ...

    def restart_learner(self, lid: str, corrupt: str = "") -> None:
        """Kill the learner and start a new incarnation after the restart delay."""
        ...

    def restart_syncer(self) -> None:
        """Start the syncer again after its restart delay (from its checkpoint)."""
        ...


OnLearner = Callable[[SimCluster, str, "Planned", bool], None]  # (sim, learner id, fault, inject?)
OnSyncer = Callable[[SimCluster, "Planned", bool], None]


@dataclass(frozen=True)
class Effect:
    learner: OnLearner | None  # None: the kind never targets a learner (syncer_crash)
    syncer: OnSyncer | None = None  # None: not modelled on the syncer


# ---- processes --------------------------------------------------------------------------------------------


def _kill(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    if inject:
        sim.learners[lid].kill()
    elif p.spec.restart:
        sim.restart_learner(lid)


def _crash_syncer(sim: SimCluster, p: Planned, inject: bool) -> None:
    if inject:
        sim.syncer.crash()
    elif getattr(p.spec, "restart", True):
        sim.restart_syncer()


def _stop(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    sim.learners[lid].graceful_stop("signal") if inject else sim.restart_learner(lid)


def _stop_syncer(sim: SimCluster, p: Planned, inject: bool) -> None:
    sim.syncer.graceful_stop("signal") if inject else sim.restart_syncer()


def _pause(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    sim.learners[lid].pause() if inject else sim.learners[lid].resume()


def _pause_syncer(sim: SimCluster, p: Planned, inject: bool) -> None:
    sim.syncer.pause() if inject else sim.syncer.resume()


def _corrupt(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    sim.restart_learner(lid, p.spec.mode if inject else "")


def _slowed(factor: Callable[[Any], float]) -> OnLearner:
    """A learner's steps take ``factor(spec)`` times longer while the fault lasts."""

    def effect(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
        if inject:
            sim.learners[lid].slow[p.fault_id] = factor(p.spec)
        else:
            sim.learners[lid].slow.pop(p.fault_id, None)

    return effect


# ---- links ------------------------------------------------------------------------------------------------


def _cut(direction: str | None, mode: str) -> OnLearner:
    """A link cut in ``direction`` (None: the fault's own). ``refuse``: the connection is gone and calls fail at
    once, so live connections close on inject; ``drop``: silence (a partition, a pulled cable), and the silent
    connections close on heal."""

    def effect(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
        if inject:
            sim.links[lid].block(p.fault_id, direction or p.spec.direction, mode)
        else:
            sim.links[lid].heal(p.fault_id)
        if (mode == "refuse") == inject:
            sim.reset_link(lid)

    return effect


def _latency(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    if inject:
        sim.links[lid].add_latency(p.fault_id, p.spec.direction, p.spec.latency_ms / 1000, p.spec.jitter_ms / 1000)
    else:
        sim.links[lid].heal(p.fault_id)


def _bandwidth(sim: SimCluster, lid: str, p: Planned, inject: bool) -> None:
    if inject:
        sim.links[lid].set_rate(p.fault_id, p.spec.direction, p.spec.rate_kbps)
    else:
        sim.links[lid].heal(p.fault_id)


EFFECTS: Mapping[str, Effect] = {
    "kill": Effect(_kill, _crash_syncer),
    "stop": Effect(_stop, _stop_syncer),
    "pause": Effect(_pause, _pause_syncer),
    "slow": Effect(_slowed(lambda spec: 1.0 / (1.0 - spec.fraction))),
    "syncer_crash": Effect(None, _crash_syncer),
    "corrupt": Effect(_corrupt),
    "partition": Effect(_cut(None, "drop")),
    "link_down": Effect(_cut("both", "refuse")),
    "bandwidth": Effect(_bandwidth),
    "latency": Effect(_latency),
    "reset_peer": Effect(_cut("both", "refuse")),
    "data_limit": Effect(_cut("both", "refuse")),
    "cpu_limit": Effect(_slowed(lambda spec: max(1.0, 1.0 / spec.cpus))),
    "disconnect": Effect(_cut("both", "drop")),
}


def play(sim: SimCluster, p: Planned, inject: bool) -> dict[str, Any]:
    """Apply (or undo) one fault; returns the evidence a real injector would report."""
    effect = EFFECTS[p.kind]
    touched: list[str] = []
    notes: list[str] = []
    for t in p.targets:
        if t in sim.learners and effect.learner is not None:
            effect.learner(sim, t, p, inject)
        elif t not in sim.learners and effect.syncer is not None:
            effect.syncer(sim, p, inject)
        else:
            notes.append(
                f"{p.kind} of the {t if t in sim.learners else 'syncer'} is not modelled: no effect on it"
            )
            continue
        touched.append(t)
    return {"simulated": p.kind, "targets": touched, **({"notes": notes} if notes else {})}
