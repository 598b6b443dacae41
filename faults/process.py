"""Process faults: kill, graceful stop, pause, slow, syncer crash, corrupt learner.

They act through the :class:`faults.base.Cluster` protocol (signals and
(re)starts by unit name), so the same faults drive local processes and
containers. Each is idempotent: inject on a unit that is already dead or
paused changes nothing, heal on a healthy unit changes nothing.

Example:
    kill = Kill(fault_id="k1", targets=("learner-0",))   # SIGKILL; heal restarts it
    kill.inject(cluster); ...; kill.heal(cluster)
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from faults.base import SYNCER, Cluster, Evidence, Fault, require_targets
from faults.errors import FaultError, TargetError
from faults.kinds import KINDS
from faults.params import FaultParams, Field
from trainer.core.corruption import CORRUPT_MODES


def _wait_dead(cluster: Cluster, units: list[str], timeout_s: float = 10.0) -> None:
    """SIGKILL is asynchronous: wait until the units are gone, so a heal right after sees them dead."""
    deadline = time.monotonic() + timeout_s
    while any(cluster.alive(u) for u in units):
        if time.monotonic() > deadline:
            raise FaultError(f"{[u for u in units if cluster.alive(u)]} still running {timeout_s}s after SIGKILL")
        time.sleep(0.01)


def _check_targets(fault_id: str, kind: str, targets: tuple[str, ...], cluster: Cluster) -> None:
    known = set(cluster.learners()) | ({SYNCER} if KINDS[kind].on_syncer else set())
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise TargetError(f"fault {fault_id}: unknown target(s) {unknown}; this cluster has {sorted(known)}")


@dataclass(frozen=True)
class Kill:
    """SIGKILL each target (a crash: no goodbye, no final checkpoint); heal restarts it when ``restart``."""

    fault_id: str
    targets: tuple[str, ...]
    restart: bool = True
    kind: ClassVar[str] = "kill"

    class Params(FaultParams):  # its scenario entry's parameters (faults.params)
        restart: bool = True

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)

    def inject(self, cluster: Cluster) -> Evidence:
        _check_targets(self.fault_id, self.kind, self.targets, cluster)
        killed = [t for t in self.targets if cluster.signal(t, signal.SIGKILL)]
        _wait_dead(cluster, killed)
        return {"killed": killed}

    def heal(self, cluster: Cluster) -> Evidence:
        if not self.restart:
            return {"restarted": []}
        restarted = []
        for t in self.targets:
            if not cluster.alive(t):
                cluster.start(t)
                restarted.append(t)
        return {"restarted": restarted}

    def describe(self) -> str:
        return f"SIGKILL {', '.join(self.targets)}" + ("; heal restarts" if self.restart else "; never restarted")


@dataclass(frozen=True)
class GracefulStop:
    """SIGTERM each target and wait for it to leave; heal starts it again."""

    fault_id: str
    targets: tuple[str, ...]
    timeout_s: float = 10.0
    kind: ClassVar[str] = "stop"
    Params: ClassVar[type[FaultParams]] = FaultParams  # none: the timeout is not a scenario's to choose

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)

    def inject(self, cluster: Cluster) -> Evidence:
        _check_targets(self.fault_id, self.kind, self.targets, cluster)
        stopped = [t for t in self.targets if cluster.alive(t)]
        for t in stopped:
            cluster.stop(t, self.timeout_s)
        return {"stopped": stopped}

    def heal(self, cluster: Cluster) -> Evidence:
        restarted = [t for t in self.targets if not cluster.alive(t)]
        for t in restarted:
            cluster.start(t)
        return {"restarted": restarted}

    def describe(self) -> str:
        return f"SIGTERM {', '.join(self.targets)} (graceful leave); heal restarts"


@dataclass(frozen=True)
class Pause:
    """SIGSTOP each target (a hung host or a long GC pause); heal sends SIGCONT."""

    fault_id: str
    targets: tuple[str, ...]
    kind: ClassVar[str] = "pause"

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)

    def inject(self, cluster: Cluster) -> Evidence:
        _check_targets(self.fault_id, self.kind, self.targets, cluster)
        return {"paused": [t for t in self.targets if cluster.signal(t, signal.SIGSTOP)]}

    def heal(self, cluster: Cluster) -> Evidence:
        return {"resumed": [t for t in self.targets if cluster.signal(t, signal.SIGCONT)]}

    def describe(self) -> str:
        return f"SIGSTOP {', '.join(self.targets)}; heal SIGCONT"


@dataclass(frozen=True)
class Slow:
    """Run each target at ``fraction`` of its normal speed: a straggler on slower hardware.

    A duty cycle of SIGSTOP/SIGCONT with period ``period_s`` (the process runs
    ``fraction`` of each period). Signals, not CPU quotas, so it works the same
    for processes and containers and needs no privileges.
    """

    fault_id: str
    targets: tuple[str, ...]
    fraction: float = 0.5
    period_s: float = 0.1
    kind: ClassVar[str] = "slow"
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False, compare=False)
    _thread: list[threading.Thread] = field(default_factory=list, init=False, repr=False, compare=False)

    class Params(FaultParams):
        fraction: float = Field(0.5, gt=0, lt=1, examples=[0.5, 0.8])
        period_s: float = Field(0.1, ge=0.01, le=10)

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)
        if not 0.0 < self.fraction < 1.0:
            raise FaultError(f"fault {self.fault_id}: field 'fraction' must be in (0, 1), got {self.fraction}")
        if not 0.01 <= self.period_s <= 10.0:
            raise FaultError(f"fault {self.fault_id}: field 'period_s' must be in [0.01, 10], got {self.period_s}")

    def _cycle(self, cluster: Cluster) -> None:
        run_s, stop_s = self.fraction * self.period_s, (1 - self.fraction) * self.period_s
        try:
            while not self._stop.wait(run_s):
                for t in self.targets:
                    cluster.signal(t, signal.SIGSTOP)
                if self._stop.wait(stop_s):
                    break
                for t in self.targets:
                    cluster.signal(t, signal.SIGCONT)
        finally:  # never leave a target stopped, whatever happened
            for t in self.targets:
                cluster.signal(t, signal.SIGCONT)

    def inject(self, cluster: Cluster) -> Evidence:
        _check_targets(self.fault_id, self.kind, self.targets, cluster)
        if self._thread and self._thread[0].is_alive():
            return {"slowed": list(self.targets), "already": True}
        self._stop.clear()
        th = threading.Thread(target=self._cycle, args=(cluster,), name=f"slow-{self.fault_id}", daemon=True)
        self._thread[:] = [th]
        th.start()
        return {"slowed": list(self.targets), "fraction": self.fraction}

    def heal(self, cluster: Cluster) -> Evidence:
        self._stop.set()
        if self._thread:
            self._thread[0].join(5 * self.period_s + 1.0)
        for t in self.targets:
            cluster.signal(t, signal.SIGCONT)
        return {"resumed": list(self.targets)}

    def describe(self) -> str:
        return f"slow {', '.join(self.targets)} to {self.fraction:.0%} speed"


@dataclass(frozen=True)
class SyncerCrash:
    """SIGKILL the syncer; heal restarts it on the same address (it resumes from its checkpoint)."""

    fault_id: str
    targets: tuple[str, ...] = (SYNCER,)
    kind: ClassVar[str] = "syncer_crash"

    def __post_init__(self) -> None:
        if self.targets != (SYNCER,):
            raise FaultError(
                f"fault {self.fault_id}: field 'targets' of a syncer_crash must be ['syncer'], "
                f"got {list(self.targets)}"
            )

    def inject(self, cluster: Cluster) -> Evidence:
        killed = [SYNCER] if cluster.signal(SYNCER, signal.SIGKILL) else []
        _wait_dead(cluster, killed)
        return {"killed": killed}

    def heal(self, cluster: Cluster) -> Evidence:
        if cluster.alive(SYNCER):
            return {"restarted": []}
        cluster.start(SYNCER)
        return {"restarted": [SYNCER]}

    def describe(self) -> str:
        return "SIGKILL the syncer; heal restarts it from its checkpoint"


@dataclass(frozen=True)
class Corrupt:
    """Restart each target learner as a corrupt one that uploads NaN or garbage; heal restarts it healthy."""

    fault_id: str
    targets: tuple[str, ...]
    mode: str = "nan"
    kind: ClassVar[str] = "corrupt"
    _injected: list[bool] = field(default_factory=list, init=False, repr=False, compare=False)

    class Params(FaultParams):
        mode: Literal["nan", "garbage", "push"] = Field("nan", examples=["nan", "garbage", "push"])

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)
        if self.mode not in CORRUPT_MODES:
            raise FaultError(
                f"fault {self.fault_id}: field 'mode' must be one of {CORRUPT_MODES}, got {self.mode!r}"
            )
        if SYNCER in self.targets:
            raise FaultError(
                f"fault {self.fault_id}: field 'targets': only learners can be corrupt, not the syncer"
            )

    def _restart(self, cluster: Cluster, corrupt: str | None) -> list[str]:
        for t in self.targets:
            cluster.signal(t, signal.SIGKILL)
        _wait_dead(cluster, list(self.targets))
        for t in self.targets:
            cluster.start(t, corrupt=corrupt)
        return list(self.targets)

    def inject(self, cluster: Cluster) -> Evidence:
        _check_targets(self.fault_id, self.kind, self.targets, cluster)
        if self._injected:
            return {"corrupt": list(self.targets), "mode": self.mode, "already": True}
        self._injected.append(True)
        return {"corrupt": self._restart(cluster, self.mode), "mode": self.mode}

    def heal(self, cluster: Cluster) -> Evidence:
        if not self._injected:  # never injected: leave the healthy learners alone
            return {"restarted_healthy": []}
        self._injected.clear()
        return {"restarted_healthy": self._restart(cluster, None)}

    def describe(self) -> str:
        return f"restart {', '.join(self.targets)} uploading {self.mode}; heal restarts healthy"


FAULTS: tuple[type[Fault], ...] = (Kill, GracefulStop, Pause, Slow, SyncerCrash, Corrupt)  # see faults.injectors
