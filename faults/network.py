"""Network faults on learner↔syncer links, through Toxiproxy (each learner's link is its own proxy), or on each
unit's own interface where the cluster runs its units in network namespaces (faults.netns: partition, link down
and bandwidth there; the others are refused with the reason).

Every fault names learner ids as ``targets``; the cluster maps an id to its proxy (``cluster.proxy(id)``).
The target ``"syncer"`` means every learner's link, so ``Partition("p1", ("syncer",))`` cuts the syncer off
from everyone (equivalently: list every learner).

``direction``: "both" (default), "to_syncer" (learner→syncer bytes; Toxiproxy stream "upstream") or
"from_syncer" (syncer→learner; stream "downstream"). A one-directional Partition is an asymmetric partition.

Toxic names are ``chaos-{fault_id}-up`` / ``chaos-{fault_id}-down``, so ``heal`` removes exactly this
fault's toxics and nothing else; ``inject`` twice is one set of toxics; ``heal`` without ``inject`` is a no-op.

Toxicity is always 1.0: Toxiproxy draws toxicity once per *connection*, and gRPC carries every RPC of a
learner on one connection, so a fraction would mean "this whole link, or not at all, by an unseeded coin".

Example:
    Latency("lat1", ("learner-0",), latency_ms=100).inject(cluster)   # +100 ms each way
    Partition("p1", ("learner-1",), direction="to_syncer").inject(cluster)
    ...
    Latency("lat1", ("learner-0",), latency_ms=100).heal(cluster)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from faults.base import SYNCER, Cluster, Evidence, Fault, OnNamespaces
from faults.errors import FaultError, TargetError
from faults.netns import NETEM_MISSING, Namespaces
from faults.params import Direction, FaultParams, Field, model_validator
from faults.toxiproxy import Toxic

DIRECTIONS: tuple[str, ...] = get_args(Direction)
_STREAMS: dict[str, tuple[str, ...]] = {
    "both": ("upstream", "downstream"),
    "to_syncer": ("upstream",),
    "from_syncer": ("downstream",),
}
_SUFFIX = {"upstream": "up", "downstream": "down"}


def toxic_name(fault_id: str, stream: str) -> str:
    """The name of a fault's toxic on one stream, e.g. ``chaos-f1-up``."""
    return f"chaos-{fault_id}-{_SUFFIX[stream]}"


def _validate_common(fault: Any) -> None:
    if not isinstance(fault.fault_id, str) or not fault.fault_id:
        raise FaultError(f"field 'fault_id' must be a non-empty string, got {fault.fault_id!r}")
    if isinstance(fault.targets, str):  # tuple("learner-0") would silently be its characters
        raise FaultError(
            f"fault {fault.fault_id}: field 'targets' must be a list of ids, got the string {fault.targets!r}"
        )
    object.__setattr__(fault, "targets", tuple(fault.targets))  # accept a list (e.g. parsed from YAML)
    if not fault.targets:
        raise FaultError(
            f"fault {fault.fault_id}: field 'targets' is empty; name at least one learner (or 'syncer')"
        )
    direction = getattr(fault, "direction", "both")
    if direction not in DIRECTIONS:
        raise FaultError(
            f"fault {fault.fault_id}: field 'direction' must be one of {DIRECTIONS}, got {direction!r}"
        )


def _int_field(fault: Any, name: str, minimum: int) -> None:
    value = getattr(fault, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise FaultError(f"fault {fault.fault_id}: field '{name}' must be {what}, got {value!r}")


def resolve_learners(fault_id: str, targets: tuple[str, ...], cluster: Cluster) -> list[str]:
    """The learner ids the targets name ("syncer" expands to every learner); TargetError on an unknown id."""
    learners = list(cluster.learners())
    unknown = [t for t in targets if t != SYNCER and t not in learners]
    if unknown:
        raise TargetError(
            f"fault {fault_id}: unknown target(s) {unknown}; this cluster's links are those of "
            f"{sorted(learners)} (or 'syncer' for all of them)"
        )
    return learners if SYNCER in targets else list(dict.fromkeys(targets))


def resolve_proxies(fault_id: str, targets: tuple[str, ...], cluster: Cluster) -> dict[str, str]:
    """Learner id → proxy name for every target ("syncer" expands to every learner); TargetError on an unknown id."""
    return {lid: cluster.proxy(lid) for lid in resolve_learners(fault_id, targets, cluster)}


class _ToxicFault:
    """Shared inject/heal of the faults that are one Toxiproxy toxic per chosen stream of each target's proxy."""

    fault_id: str
    targets: tuple[str, ...]
    kind: ClassVar[str]
    toxic_type: ClassVar[str]

    def _streams(self) -> tuple[str, ...]:
        return _STREAMS[getattr(self, "direction", "both")]

    def _attributes(self) -> dict[str, Any]:
        raise NotImplementedError

    def on_namespaces(self, ns: Namespaces, units: list[str], inject: bool) -> Evidence:
        """The fault on the units' own interfaces (faults.netns); only some kinds have one."""
        raise FaultError(
            f"fault {self.fault_id}: {self.kind} is Toxiproxy's (a proxy's toxic): it has no form on a unit's "
            "own interface in its network namespace"
        )

    def inject(self, cluster: Cluster) -> Evidence:
        if isinstance(cluster, OnNamespaces):
            units = resolve_learners(self.fault_id, self.targets, cluster)
            return self.on_namespaces(cluster.namespaces, units, inject=True)
        proxies = resolve_proxies(self.fault_id, self.targets, cluster)
        tp = cluster.toxiproxy
        added = []
        for proxy in proxies.values():
            for stream in self._streams():
                name = toxic_name(self.fault_id, stream)
                # toxicity 1.0 always: see the module docstring.
                tp.add_toxic(proxy, Toxic(name, self.toxic_type, stream, 1.0, self._attributes()))
                added.append(f"{proxy}/{name}")
        return {"proxies": proxies, "toxic": self.toxic_type, "attributes": self._attributes(), "toxics": added}

    def heal(self, cluster: Cluster) -> Evidence:
        if isinstance(cluster, OnNamespaces):
            units = resolve_learners(self.fault_id, self.targets, cluster)
            return self.on_namespaces(cluster.namespaces, units, inject=False)
        proxies = resolve_proxies(self.fault_id, self.targets, cluster)
        tp = cluster.toxiproxy
        removed = []
        for proxy in proxies.values():
            for stream in _SUFFIX:  # both names, whatever the direction: each is ours alone
                name = toxic_name(self.fault_id, stream)
                if tp.remove_toxic(proxy, name):
                    removed.append(f"{proxy}/{name}")
        return {"proxies": proxies, "removed": removed}

    def _where(self) -> str:
        who = "every learner's link" if SYNCER in self.targets else ", ".join(self.targets)
        direction = getattr(self, "direction", "both")
        return who + ("" if direction == "both" else f" ({direction.replace('_', ' ')} only)")


@dataclass(frozen=True)
class Partition(_ToxicFault):
    """Black-hole the targets' links: a ``timeout`` toxic with timeout 0 drops every byte, forever.

    Connections are not refused and not closed: they just go silent, as in a real partition, so
    only timeouts and keepalives notice. ``direction`` other than "both" is an asymmetric partition.
    Healing removes the toxic, and Toxiproxy then closes the connections that were cut: peers see
    a reset and reconnect, as after a real partition that outlived the TCP session.

    Example:
        Partition("p1", ("learner-0",))                          # learner-0 cut off both ways
        Partition("p2", ("syncer",), direction="from_syncer")    # nobody hears from the syncer
    """

    fault_id: str
    targets: tuple[str, ...]
    direction: str = "both"
    kind: ClassVar[str] = "partition"
    toxic_type: ClassVar[str] = "timeout"

    class Params(FaultParams):  # its scenario entry's parameters (faults.params)
        direction: Direction = Field("both", examples=list(DIRECTIONS))

    def __post_init__(self) -> None:
        _validate_common(self)

    def _attributes(self) -> dict[str, Any]:
        return {"timeout": 0}

    def on_namespaces(self, ns: Namespaces, units: list[str], inject: bool) -> Evidence:
        if inject:
            for u in units:
                ns.cut(u, self.direction)
            return {"namespaces": {u: ns.namespace(u) for u in units}, "dropped": self.direction}
        return {"namespaces": {u: ns.namespace(u) for u in units}, "mended": [u for u in units if ns.mend(u)]}

    def describe(self) -> str:
        return f"partition {self._where()}: bytes dropped, connections stay open"


@dataclass(frozen=True)
class LinkDown:
    """Take the targets' proxies down (enabled=false): new connections refused, live ones closed; heal re-enables."""

    fault_id: str
    targets: tuple[str, ...]
    kind: ClassVar[str] = "link_down"

    def __post_init__(self) -> None:
        _validate_common(self)

    def inject(self, cluster: Cluster) -> Evidence:
        if isinstance(cluster, OnNamespaces):
            return self._links(cluster, cluster.namespaces, up=False)
        proxies = resolve_proxies(self.fault_id, self.targets, cluster)
        for proxy in proxies.values():
            cluster.toxiproxy.set_enabled(proxy, False)
        return {"proxies": proxies, "disabled": sorted(proxies.values())}

    def _links(self, cluster: Cluster, ns: Namespaces, up: bool) -> Evidence:
        units = resolve_learners(self.fault_id, self.targets, cluster)
        for u in units:
            ns.link(u, up)
        return {"namespaces": {u: ns.namespace(u) for u in units}, "up": up}

    def heal(self, cluster: Cluster) -> Evidence:
        if isinstance(cluster, OnNamespaces):
            return self._links(cluster, cluster.namespaces, up=True)
        proxies = resolve_proxies(self.fault_id, self.targets, cluster)
        for proxy in proxies.values():
            cluster.toxiproxy.set_enabled(proxy, True)
        return {"proxies": proxies, "enabled": sorted(proxies.values())}

    def describe(self) -> str:
        who = "every learner's link" if SYNCER in self.targets else ", ".join(self.targets)
        return f"link down for {who}: connections refused and closed"


@dataclass(frozen=True)
class Bandwidth(_ToxicFault):
    """Cap throughput at ``rate_kbps`` kiloBYTES per second (KB = 1000 bytes; not kilobits).

    Toxiproxy's limit is per connection and per direction, not per proxy: with "both", each direction
    of each connection gets its own ``rate_kbps``.

    Example:
        Bandwidth("bw1", ("learner-0",), rate_kbps=100)   # 100 KB/s each way: 1 MB takes ~10 s
    """

    fault_id: str
    targets: tuple[str, ...]
    rate_kbps: int
    direction: str = "both"
    kind: ClassVar[str] = "bandwidth"
    toxic_type: ClassVar[str] = "bandwidth"

    class Params(FaultParams):
        rate_kbps: int = Field(
            ge=1, description="KB/s per connection per direction (KB = 1000 bytes)", examples=[50, 200, 1000, 5000]
        )
        direction: Direction = "both"

    def __post_init__(self) -> None:
        _validate_common(self)
        # The server accepts any rate: 0 stalls the link for good, a negative one crashes the whole server.
        _int_field(self, "rate_kbps", 1)

    def _attributes(self) -> dict[str, Any]:
        return {"rate": self.rate_kbps}

    def on_namespaces(self, ns: Namespaces, units: list[str], inject: bool) -> Evidence:
        """A token bucket per unit, each way: per unit, not per connection as Toxiproxy's (``direction`` both)."""
        if self.direction != "both":
            raise FaultError(f"fault {self.fault_id}: on namespaces bandwidth is limited both ways only")
        where = {u: ns.namespace(u) for u in units}
        if inject:
            for u in units:
                ns.throttle(u, self.rate_kbps * 1000)
            return {"namespaces": where, "rate_bytes_s": self.rate_kbps * 1000}
        return {"namespaces": where, "unthrottled": [u for u in units if ns.unthrottle(u)]}

    def describe(self) -> str:
        return f"bandwidth {self.rate_kbps} KB/s per connection per direction on {self._where()}"


@dataclass(frozen=True)
class Latency(_ToxicFault):
    """Delay bytes by ``latency_ms`` ± ``jitter_ms`` one way, per chosen stream.

    Toxiproxy latency is one-way: with "both" it is added in each direction, so a request/response
    round trip gets 2 × ``latency_ms`` more. Jitter comes from Toxiproxy's own unseeded random source,
    so keep it 0 where a run must replay exactly.

    Example:
        Latency("lat1", ("learner-0",), latency_ms=50)    # +100 ms round trip
    """

    fault_id: str
    targets: tuple[str, ...]
    latency_ms: int
    jitter_ms: int = 0
    direction: str = "both"
    kind: ClassVar[str] = "latency"
    toxic_type: ClassVar[str] = "latency"

    class Params(FaultParams):
        latency_ms: int = Field(ge=0)
        jitter_ms: int = Field(0, ge=0)
        direction: Direction = "both"

        @model_validator(mode="after")
        def _jitter(self) -> Latency.Params:
            if self.jitter_ms > self.latency_ms:
                raise ValueError(f"jitter_ms ({self.jitter_ms}) cannot exceed latency_ms ({self.latency_ms})")
            return self

        @classmethod
        def example(cls, pick: Any) -> dict[str, Any]:  # the jitter depends on the latency
            latency = pick([20, 100, 500])
            return {"latency_ms": latency, "jitter_ms": pick([0, latency // 2])}

    def __post_init__(self) -> None:
        _validate_common(self)
        _int_field(self, "latency_ms", 0)  # the server accepts negative latency silently
        _int_field(self, "jitter_ms", 0)
        if self.jitter_ms > self.latency_ms:
            raise FaultError(
                f"fault {self.fault_id}: field 'jitter_ms' ({self.jitter_ms}) must not exceed "
                f"latency_ms ({self.latency_ms}): the delay would go negative"
            )

    def _attributes(self) -> dict[str, Any]:
        return {"latency": self.latency_ms, "jitter": self.jitter_ms}

    def on_namespaces(self, ns: Namespaces, units: list[str], inject: bool) -> Evidence:
        raise FaultError(f"fault {self.fault_id}: {NETEM_MISSING}")

    def describe(self) -> str:
        jitter = f" ± {self.jitter_ms}" if self.jitter_ms else ""
        return f"latency +{self.latency_ms}{jitter} ms one way on {self._where()}"


@dataclass(frozen=True)
class ResetPeer(_ToxicFault):
    """Reset (TCP RST) each connection once data flows on a chosen stream, after ``timeout_ms``.

    With "both", the first byte either way (after the delay) resets the connection. New connections are
    reset too, until heal.

    Example:
        ResetPeer("rst1", ("learner-0",))                  # every RPC fails with a connection reset
    """

    fault_id: str
    targets: tuple[str, ...]
    timeout_ms: int = 0
    direction: str = "both"
    kind: ClassVar[str] = "reset_peer"
    toxic_type: ClassVar[str] = "reset_peer"

    class Params(FaultParams):
        timeout_ms: int = Field(0, ge=0)

    def __post_init__(self) -> None:
        _validate_common(self)
        _int_field(self, "timeout_ms", 0)

    def _attributes(self) -> dict[str, Any]:
        return {"timeout": self.timeout_ms}

    def describe(self) -> str:
        return f"reset connections {self.timeout_ms} ms after data flows on {self._where()}"


@dataclass(frozen=True)
class DataLimit(_ToxicFault):
    """Close each connection after ``bytes`` bytes on a chosen stream (``limit_data``), e.g. mid-upload.

    The count is per connection and per direction; a new connection gets a fresh allowance.

    Example:
        DataLimit("dl1", ("learner-0",), bytes=64_000, direction="to_syncer")   # uploads cut after 64 KB
    """

    fault_id: str
    targets: tuple[str, ...]
    bytes: int
    direction: str = "both"
    kind: ClassVar[str] = "data_limit"
    toxic_type: ClassVar[str] = "limit_data"

    class Params(FaultParams):
        bytes: int = Field(ge=1, examples=[500, 100_000])
        direction: Direction = Field("both", examples=list(DIRECTIONS))

    def __post_init__(self) -> None:
        _validate_common(self)
        _int_field(self, "bytes", 1)

    def _attributes(self) -> dict[str, Any]:
        return {"bytes": self.bytes}

    def describe(self) -> str:
        return f"close connections after {self.bytes} bytes on {self._where()}"


# see faults.injectors
FAULTS: tuple[type[Fault], ...] = (Partition, LinkDown, Bandwidth, Latency, ResetPeer, DataLimit)
