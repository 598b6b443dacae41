"""Backends: where the cluster runs, behind one :class:`Backend` protocol.

A backend is a :class:`faults.base.Cluster` (what faults act on) plus the
lifecycle the controller drives: bring the cluster up with every learner's
link behind its own Toxiproxy proxy, poll the syncer, and tear everything
down on any exit path. ``local`` runs child processes; a container backend
implements the same protocol, so scenarios, faults and checkers do not change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from faults.base import Cluster
from trainer.client import SyncClient


@runtime_checkable
class Backend(Cluster, Protocol):
    tag: str  # prefix of every Toxiproxy proxy this backend creates
    run_dir: Path

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

    def teardown(self) -> dict[str, Any]:
        """Remove this run's proxies, stop every unit, collect logs; never raises."""
        ...
