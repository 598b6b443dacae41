"""Container faults: CPU limits (slower hardware) and network disconnects (hard partitions).

They need a :class:`ContainerCluster` — a cluster whose units are containers —
and refuse any other with a FaultError saying so. Both are idempotent: the
limit is set to the same value, a disconnected container is not disconnected
again, and heal restores exactly what inject changed.

Example:
    CpuLimit("slow-1", ("learner-1",), cpus=0.25).inject(cluster)   # a quarter of one core
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from faults.base import Cluster, Evidence, Fault, require_targets
from faults.errors import FaultError
from faults.params import FaultParams, Field

CPU_PERIOD_US = 100_000


@runtime_checkable
class ContainerCluster(Cluster, Protocol):
    """A cluster whose units are containers."""

    def container(self, unit: str) -> Any:
        """The unit's container (a docker SDK Container)."""
        ...

    def network(self, unit: str) -> Any:
        """The network ``unit`` talks to the others on (a docker SDK Network)."""
        ...


def _containers(fault_id: str, cluster: Cluster) -> ContainerCluster:
    if not isinstance(cluster, ContainerCluster):
        raise FaultError(f"fault {fault_id}: needs containers; run the scenario with --backend docker")
    return cluster


@dataclass(frozen=True)
class CpuLimit:
    """Cap each target container at ``cpus`` cores (heterogeneous hardware); heal lifts the cap."""

    fault_id: str
    targets: tuple[str, ...]
    cpus: float = 0.25
    kind: ClassVar[str] = "cpu_limit"

    class Params(FaultParams):  # its scenario entry's parameters (faults.params)
        cpus: float = Field(0.25, ge=0.01, le=64)

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)
        if not 0.01 <= self.cpus <= 64:
            raise FaultError(f"fault {self.fault_id}: field 'cpus' must be in [0.01, 64], got {self.cpus}")

    def inject(self, cluster: Cluster) -> Evidence:
        cc = _containers(self.fault_id, cluster)
        for t in self.targets:
            cc.container(t).update(cpu_period=CPU_PERIOD_US, cpu_quota=int(self.cpus * CPU_PERIOD_US))
        return {"limited": list(self.targets), "cpus": self.cpus}

    def heal(self, cluster: Cluster) -> Evidence:
        cc = _containers(self.fault_id, cluster)
        for t in self.targets:
            cc.container(t).update(cpu_period=CPU_PERIOD_US, cpu_quota=-1)  # -1: no quota
        return {"unlimited": list(self.targets)}

    def describe(self) -> str:
        return f"limit {', '.join(self.targets)} to {self.cpus} CPU"


@dataclass(frozen=True)
class Disconnect:
    """Disconnect each target container from the network (a hard partition below Toxiproxy); heal reconnects.

    The container keeps running; every connection it had dies. Reconnecting restores its
    service name as a DNS alias, so ``syncer`` resolves again after a syncer disconnect.
    """

    fault_id: str
    targets: tuple[str, ...]
    kind: ClassVar[str] = "disconnect"
    _cut: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_targets(self.fault_id, self.targets)

    def inject(self, cluster: Cluster) -> Evidence:
        cc = _containers(self.fault_id, cluster)
        for t in self.targets:
            if t in self._cut:
                continue
            net, c = cc.network(t), cc.container(t)
            c.reload()
            if net.name in c.attrs["NetworkSettings"]["Networks"]:
                net.disconnect(c, force=True)
                self._cut.append(t)
        return {"disconnected": list(self._cut)}

    def heal(self, cluster: Cluster) -> Evidence:
        cc = _containers(self.fault_id, cluster)
        healed = []
        for t in list(self._cut):
            cc.network(t).connect(cc.container(t), aliases=[t])
            self._cut.remove(t)
            healed.append(t)
        return {"reconnected": healed}

    def describe(self) -> str:
        return f"disconnect {', '.join(self.targets)} from the network"


FAULTS: tuple[type[Fault], ...] = (CpuLimit, Disconnect)  # see faults.injectors
