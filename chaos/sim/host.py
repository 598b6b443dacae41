"""What deterministic mode's nodes need of the simulation that drives them, and what they share.

:class:`~chaos.sim.syncer_node.SyncerNode` and :class:`~chaos.sim.learner_node.LearnerNode` run the real core
state machines on the event loop; every node writes the same events (:mod:`trainer.events`) a real process writes,
stamped with virtual time, so the chaos checkers judge a simulated run exactly as they judge a real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from chaos.sim.clock import EventLoop
    from chaos.sim.options import SimOptions
    from chaos.sim.problem import QuadraticProblem
    from trainer.audit_log import AuditWriter
    from trainer.config import RunConfig
    from trainer.core.fragments import Fragment
    from trainer.core.syncer_policy import SyncerPolicy

Respond = Callable[[Any, int], None]  # (reply, reply bytes)


class SimHost(Protocol):
    """What the nodes need of the simulation that drives them (:class:`chaos.sim.runner.Simulation`)."""

    cfg: RunConfig
    config_hash: str
    opts: SimOptions
    loop: EventLoop
    rng: np.random.Generator
    problem: QuadraticProblem
    policy: SyncerPolicy
    fragments: tuple[Fragment, ...]
    fragment_names: list[list[str]]
    tokens_per_step: int
    syncer: Any  # the chaos.sim.syncer_node.SyncerNode (named, not imported: the nodes import this module)
    audit: AuditWriter  # every merge digested, its tensors kept in memory

    def emit(self, source: str, kind: type, **fields: Any) -> None:
        """Write one event, stamped with virtual time."""
        ...

    def rpc(
        self,
        node: Any,
        req_bytes: int,
        handler: Callable[..., None],
        on_reply: Callable[[Any], None],
        on_fail: Callable[[], None],
        on_header: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        on_piece: Callable[[], None] | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """A unary call from a learner (a LearnerNode) to the syncer over its link (``deadline_s``: None, the RPC
        timeout)."""
        ...

    def upload_seconds(self, lid: str, nbytes: int) -> float:
        """How long ``nbytes`` take over the learner's link to the syncer."""
        ...

    def on_merge(self, merges_total: int) -> None:
        """The syncer merged (the fault plan may start an at_merge fault)."""
        ...

    def on_syncer_exit(self) -> None:
        """The syncer finished and exited: the run ends."""
        ...


SMALL_MESSAGE = 200  # bytes of a request or reply without tensors
