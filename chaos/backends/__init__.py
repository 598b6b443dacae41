"""Backends: where the cluster runs, behind one :class:`Backend` protocol.

A backend is a :class:`faults.base.Cluster` (what faults act on) plus the
lifecycle the controller drives: bring the cluster up with every learner's
link behind its own Toxiproxy proxy, poll the syncer, and tear everything
down on any exit path. ``local`` runs child processes; a container backend
implements the same protocol, so scenarios, faults and checkers do not change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from chaos.history import Teardown
from faults.base import SYNCER, Cluster
from faults.errors import FaultError, TargetError
from faults.toxiproxy import Toxiproxy
from trainer.client import SyncClient
from trainer.config import learner_ids


class ProxiedUnits:
    """What every backend shares: the learner ids, this run's proxies (``<tag>-<learner>``), unit name checks."""

    def __init__(self, num_learners: int, toxiproxy: Toxiproxy, tag: str) -> None:
        self._ids = learner_ids(num_learners)
        self._toxiproxy = toxiproxy
        self.tag = tag

    def learners(self) -> list[str]:
        return list(self._ids)

    @property
    def toxiproxy(self) -> Toxiproxy:
        return self._toxiproxy

    def proxy(self, learner_id: str) -> str:
        if learner_id not in self._ids:
            raise TargetError(f"unknown learner {learner_id!r}; this cluster has {self._ids}")
        return f"{self.tag}-{learner_id}"

    def _delete_proxies(self) -> list[str]:
        """Delete this run's proxies (and so every toxic on them); returns the problems, never raises."""
        problems: list[str] = []
        for lid in self._ids:
            try:
                self._toxiproxy.delete_proxy(self.proxy(lid))
            except FaultError as err:
                problems.append(f"proxy {self.proxy(lid)}: {err}")
        return problems

    def _known(self, unit: str) -> None:
        if unit != SYNCER and unit not in self._ids:
            raise TargetError(f"unknown unit {unit!r}; this cluster has {[SYNCER, *self._ids]}")


@runtime_checkable
class Backend(Cluster, Protocol):
    name: str  # what --backend calls it ("local", "docker"); written to the history, read by the report
    tag: str  # prefix of every Toxiproxy proxy this backend creates
    run_dir: Path

    @property
    def events_dir(self) -> Path:
        """Where the units write their events while the run executes (the controller's watchdog reads the
        syncer's merges there: chaos.watchdog)."""
        ...

    def bring_up(self) -> None:
        """Start the syncer, one proxy per learner, and the learners behind their proxies."""
        ...

    def client(self, timeout_s: float = 0.5) -> SyncClient:
        """A direct (unproxied) client of the syncer for the controller's status polls."""
        ...

    def exit_code(self, unit: str) -> int | None:
        """The unit's exit code once it has exited; None while it runs (or never ran)."""
        ...

    def running_units(self) -> list[str]:
        """Units still running (after teardown this must be empty)."""
        ...

    def teardown(self) -> Teardown:
        """Remove this run's proxies, stop every unit, collect logs; never raises."""
        ...
