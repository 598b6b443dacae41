"""The Fault protocol and the Cluster it acts on.

A fault is a small typed value (what to do, to whom). ``inject`` and ``heal``
are idempotent: injecting twice is one fault, healing twice (or healing a
fault that was never injected) is harmless, so the controller can heal
everything on every exit path without bookkeeping of what got how far.
Both return a short JSON-able ``evidence`` dict for the history.

Example:
    fault = Pause(fault_id="f1", targets=("learner-1",))
    fault.inject(cluster)   # SIGSTOP
    fault.heal(cluster)     # SIGCONT
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from faults.errors import FaultError

if TYPE_CHECKING:
    from faults.netns import Namespaces
    from faults.toxiproxy import Toxiproxy

SYNCER = "syncer"
Evidence = dict[str, object]  # a JSON object: what an inject or heal did, in the injector's own words


def require_targets(fault_id: str, targets: tuple[str, ...]) -> None:
    """Every fault needs someone to act on; the error names the field."""
    if not targets:
        raise FaultError(f"fault {fault_id}: field 'targets' is empty; name at least one unit")


@runtime_checkable
class Cluster(Protocol):
    """What faults act on; a backend (local processes, containers) implements it.

    Units are named: ``"syncer"`` or a learner id such as ``"learner-0"``.
    """

    def learners(self) -> list[str]:
        """Every learner id of the cluster (running or not)."""
        ...

    @property
    def toxiproxy(self) -> Toxiproxy:
        """Client of the Toxiproxy server that carries the learners' links."""
        ...

    def proxy(self, learner_id: str) -> str:
        """Name of the Toxiproxy proxy carrying ``learner_id``'s link to the syncer."""
        ...

    def alive(self, unit: str) -> bool:
        """Whether the unit's process (or container) is running."""
        ...

    def signal(self, unit: str, sig: int) -> bool:
        """Send ``sig`` to the unit; False when it is not running."""
        ...

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        """(Re)start a unit that is not running; a learner may be started corrupt ("nan" or "garbage")."""
        ...

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        """Stop a unit gracefully (SIGTERM, then SIGKILL after ``timeout_s``); no-op when not running."""
        ...


@runtime_checkable
class OnNamespaces(Protocol):
    """A cluster whose units run in network namespaces of their own (faults.netns): its network faults act on each
    unit's interface there, not on Toxiproxy proxies."""

    @property
    def namespaces(self) -> Namespaces: ...


@runtime_checkable
class Fault(Protocol):
    """One fault: idempotent ``inject`` and ``heal``, and a one-line description."""

    kind: ClassVar[str]  # the injector class's kind (faults.kinds.KINDS)

    @property
    def fault_id(self) -> str: ...  # read-only: the injectors are frozen dataclasses

    @property
    def targets(self) -> tuple[str, ...]: ...

    def inject(self, cluster: Cluster) -> Evidence: ...

    def heal(self, cluster: Cluster) -> Evidence: ...

    def describe(self) -> str: ...
