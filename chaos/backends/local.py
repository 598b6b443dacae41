"""The local backend: syncer and learners as child processes, each learner's link through its own proxy.

Topology::

    learner-i ──> Toxiproxy proxy "<tag>-learner-i" (127.0.0.1:p_i) ──> syncer (127.0.0.1:port)

The syncer keeps one port for the whole run so a restarted syncer is found
behind the same proxies. Implements :class:`faults.base.Cluster`, so every
fault drives it; :meth:`teardown` removes this run's proxies (and so every
toxic on them) and stops every process, whatever state the run is in.

Example:
    with LocalBackend(cfg, run_dir, toxiproxy) as cluster:
        cluster.bring_up()
        ...
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from chaos.backends import ProxiedUnits
from chaos.errors import RunError
from chaos.history import Teardown
from faults.base import SYNCER
from faults.errors import FaultError
from faults.netns import Namespaces
from faults.toxiproxy import ProxySpec, Toxiproxy
from trainer.client import RetryPolicy, SyncClient
from trainer.config import RunConfig
from trainer.errors import AddressInUse, TrainerError
from trainer.launch import LocalCluster

LEARNER_NICE = 5


class LocalBackend(ProxiedUnits):
    """Local processes behind Toxiproxy; the Cluster every fault acts on."""

    name = "local"

    def __init__(self, config: RunConfig, run_dir: Path, toxiproxy: Toxiproxy, tag: str = "chaos") -> None:
        super().__init__(config.algorithm.num_learners, toxiproxy, tag)
        self.config = config
        self.run_dir = Path(run_dir)
        # Learners run niced: the syncer stands for another machine, and a restarted syncer must not
        # take 15 s to import JAX because three learners hold both cores (measured before this).
        self.procs = LocalCluster(config, self.run_dir, learner_nice=LEARNER_NICE)
        # Every server binds its own port: the syncer and the proxies start on port 0 and report the port they
        # got. (A port chosen as free and bound later can be taken in between: seen on loaded CI machines.)
        self.port = 0
        self.proxy_ports: dict[str, int] = {}
        self.corrupt: dict[str, str | None] = {}

    # ---- faults.base.Cluster (learners, toxiproxy, proxy: ProxiedUnits) ------
    def alive(self, unit: str) -> bool:
        self._known(unit)
        return self.procs.alive(unit)

    def signal(self, unit: str, sig: int) -> bool:
        self._known(unit)
        if not self.procs.alive(unit):
            return False
        try:
            self.procs.signal(unit, sig)
        except ProcessLookupError:
            return False
        return True

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        self._known(unit)
        self._reap(unit)
        if unit == SYNCER:
            try:
                self._start_syncer()
            except TrainerError as err:
                raise FaultError(f"restarting the syncer failed: {err}") from None
            return
        self.corrupt[unit] = corrupt
        self.procs.start_learner(unit, address=self._learner_address(unit), corrupt=corrupt)

    def _learner_address(self, unit: str) -> str:
        """Where a learner reaches the syncer: its own proxy."""
        return f"127.0.0.1:{self.proxy_ports[unit]}"

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        self._known(unit)
        if not self.procs.alive(unit):
            return
        self.signal(unit, signal.SIGCONT)  # a paused process cannot handle SIGTERM
        self.signal(unit, signal.SIGTERM)
        try:
            self.procs.procs[unit].wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(unit, signal.SIGKILL)
            self.procs.procs[unit].wait(10)

    @property
    def events_dir(self) -> Path:
        return self.run_dir / "events"

    # ---- lifecycle -------------------------------------------------------------
    def bring_up(self) -> None:
        """Start the syncer, one proxy per learner, then the learners (through their proxies)."""
        self.start(SYNCER)
        specs = [
            ProxySpec(name=self.proxy(lid), listen="127.0.0.1:0", upstream=f"127.0.0.1:{self.port}", enabled=True)
            for lid in self._ids
        ]
        by_name = {p.name: p for p in self._toxiproxy.populate(specs)}
        for lid in self._ids:
            self.proxy_ports[lid] = by_name[self.proxy(lid)].port
        for lid in self._ids:
            self.start(lid)

    def _start_syncer(self) -> None:
        """Start the syncer on its port (0 the first time); if that port was taken while it was down, on a new
        one, with every proxy re-pointed at it."""
        try:
            address, moved = self.procs.start_syncer(port=self.port), False
        except AddressInUse:
            address, moved = self.procs.start_syncer(port=0), True
        self.port = int(address.rsplit(":", 1)[1])
        if moved:
            for lid in self.proxy_ports:
                self._toxiproxy.set_upstream(self.proxy(lid), f"127.0.0.1:{self.port}")

    def client(self, timeout_s: float = 0.5) -> SyncClient:
        """A direct (unproxied) client for the controller's status polls: one quick try, never a stall."""
        return SyncClient(
            f"127.0.0.1:{self.port}", self.procs.token, timeout_s=timeout_s, retry=RetryPolicy(attempts=1)
        )

    def exit_code(self, unit: str) -> int | None:
        p = self.procs.procs.get(unit)
        return None if p is None else p.poll()

    def running_units(self) -> list[str]:
        return [n for n, p in self.procs.procs.items() if p.poll() is None]

    def teardown(self) -> Teardown:
        """Remove this run's proxies (with their toxics) and stop every process; never raises."""
        problems = self._delete_proxies()
        codes = self.procs.stop_all()
        self.procs.finalize(codes)
        return Teardown(exit_codes=codes, problems=problems)

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # ---- helpers -----------------------------------------------------------------
    def _reap(self, unit: str, timeout_s: float = 10.0) -> None:
        """Wait for a killed process to be gone before its successor starts."""
        p = self.procs.procs.get(unit)
        if p is None:
            return
        deadline = time.monotonic() + timeout_s
        while p.poll() is None:
            if time.monotonic() > deadline:
                raise RunError(f"{unit} (pid {p.pid}) is still running; cannot start another")
            time.sleep(0.02)


class NamespacedLocalBackend(LocalBackend):
    """The local backend with each learner in a network namespace of its own (faults.netns), reaching the syncer
    on the bridge's address directly, with no proxy: network faults act on a learner's own interface
    (faults.base.OnNamespaces: partition, link down, bandwidth; the Toxiproxy-only kinds are refused). Needs root.

    Topology::

        learner-i (namespace, 10.x.y.(10+i)) ──eth0── bridge (10.x.y.1) ── syncer (root namespace, 10.x.y.1:port)
    """

    name = "namespaces"

    def __init__(self, config: RunConfig, run_dir: Path, toxiproxy: Toxiproxy, tag: str = "chaos") -> None:
        super().__init__(config, run_dir, toxiproxy, tag)
        self._ns = Namespaces.for_run(f"{tag}-{run_dir}", self.learners())
        self.procs.prefix = self._ns.exec_prefix

    @property
    def namespaces(self) -> Namespaces:
        return self._ns

    def proxy(self, learner_id: str) -> str:
        raise FaultError(f"the namespaces backend has no proxies: {learner_id}'s link is its own interface")

    def _learner_address(self, unit: str) -> str:
        """The syncer itself, on the bridge's address: no proxy."""
        return f"{self._ns.gateway}:{self.port}"

    def bring_up(self) -> None:
        """The namespaces and bridge, the syncer on the bridge's address, then the learners in their namespaces."""
        self._ns.up()
        self.start(SYNCER)
        for lid in self._ids:
            self.start(lid)

    def _start_syncer(self) -> None:
        address = self.procs.start_syncer(port=self.port, host=self._ns.gateway)
        self.port = int(address.rsplit(":", 1)[1])

    def client(self, timeout_s: float = 0.5) -> SyncClient:
        return SyncClient(
            f"{self._ns.gateway}:{self.port}", self.procs.token, timeout_s=timeout_s, retry=RetryPolicy(attempts=1)
        )

    def _delete_proxies(self) -> list[str]:
        return []

    def teardown(self) -> Teardown:
        """Stop every process, then remove the namespaces and the bridge; never raises."""
        done = super().teardown()
        return Teardown(exit_codes=done.exit_codes, problems=[*done.problems, *self._ns.teardown()])
