"""The syncer's records: what a learner uploads (:class:`Contribution`), what the syncer keeps of each learner and
of each fragment's pending round, and what a join, an upload and a merge return."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer.core.audit import MergeAudit
from trainer.core.checkpoint_meta import Key

__all__ = [
    "Tensors",
    "Specs",
    "tensor_specs",
    "LearnerRecord",
    "Contribution",
    "Round",
    "SubmitResult",
    "Participant",
    "MergeRecord",
    "JoinResult",
]

Tensors = dict[str, np.ndarray]
Specs = dict[
    str, tuple[tuple[int, ...], str]
]  # tensor name -> (shape, dtype name): what an upload's header declares


@functools.cache
def _dtype_name(dtype: np.dtype) -> str:
    return str(dtype)  # numpy builds the name anew on every str(): cached, as the simulator asks ~10⁵ times a run


def tensor_specs(tensors: Mapping[str, Any], wire_format: str = "float32") -> Specs:
    """Each tensor's (shape, dtype name), as an upload's header declares them when fp32 values travel in
    ``wire_format`` (trainer.core.wire_formats; the syncer decodes them back to fp32). Any other dtype keeps its name.

    >>> tensor_specs({"w": np.zeros((2, 3), np.float32), "b": np.zeros(2)}, "int8")
    {'w': ((2, 3), 'int8'), 'b': ((2,), 'float64')}
    """
    out = {}
    for n, t in tensors.items():
        name = _dtype_name(t.dtype)
        out[n] = (tuple(t.shape), wire_format if name == "float32" else name)
    return out


@dataclass
class LearnerRecord:
    learner_id: str
    incarnation: str
    incarnation_index: int
    joined_at: float
    last_seen: float
    left: bool = False
    step: int = 0
    tokens: int = 0
    merged_contributions: int = 0
    merged_since_back: bool = False  # merged since it joined or came back from an absence (settle waits for it)
    # Uploads whose header was accepted and whose body is still coming: when each one's latest bytes arrived.
    bodies: dict[Key, float] = field(default_factory=dict)

    def heard_at(self) -> float:
        """When the learner last showed it is alive: an accepted message, or bytes of an upload still coming.

        A body crossing a slow link holds the learner's other messages (its reports) queued behind it on the
        same connection: a 3.4 MB fragment over 500 KB/s keeps it silent for 7 s, longer than the liveness
        timeout, and its round merged at the first upload, every other learner taken for dead. The bytes
        count only while the body comes: one that ends refused (or never whole) is no sign of life.

        >>> r = LearnerRecord("a", "i", 0, joined_at=0.0, last_seen=1.0)
        >>> r.heard_at(), r.active(7.0, timeout_s=5.0)
        (1.0, False)
        >>> r.bodies[("a", "i", 0, 0, 0)] = 6.5
        >>> r.heard_at(), r.active(7.0, timeout_s=5.0)
        (6.5, True)
        """
        return max(self.last_seen, *self.bodies.values()) if self.bodies else self.last_seen

    def active(self, now: float, timeout_s: float) -> bool:
        return not self.left and now - self.heard_at() <= timeout_s


@dataclass(frozen=True)
class Contribution:
    """A learner's outer gradient for one fragment (Θ_p(base) − θ_p), with its counters since it last received it."""

    learner_id: str
    incarnation: str
    fragment: int
    base_version: int
    tensors: Tensors
    c_steps: int
    c_tokens: int
    upload_seconds: float = 0.0
    round: int = 0  # the round it was made for (rounds="clock"); a learner's own sync count otherwise

    @property
    def key(self) -> Key:
        return (self.learner_id, self.incarnation, self.fragment, self.base_version, self.round)


@dataclass
class Round:
    """The pending round of one fragment: what arrived for it since the fragment's last merge."""

    fragment: int
    base_version: int  # the fragment's version when the round started (its merge makes base_version + 1)
    opened_at: float
    round: int = 0
    quorum_at: float | None = None
    contributions: dict[str, Contribution] = field(default_factory=dict)
    late: int = 0  # contributions carried in from rounds that had already merged
    arrived_at: dict[str, float] = field(default_factory=dict)  # learner -> when its contribution's body arrived
    eligible_at: float | None = (
        None  # first held its quorum with its opening passed, before a carry moved the opening
    )

    def eligible_since(self, now: float) -> float | None:
        """Since when the round could have merged by quorum and opening (a carried round: its first such moment).

        >>> r = Round(0, 0, opened_at=2.0, quorum_at=1.0)
        >>> r.eligible_since(3.0), r.eligible_since(1.5)
        (2.0, None)
        """
        if self.quorum_at is None:
            return self.eligible_at
        e = max(self.quorum_at, self.opened_at)
        if e > now:
            return self.eligible_at
        return e if self.eligible_at is None else min(self.eligible_at, e)


@dataclass(frozen=True)
class SubmitResult:
    accepted: bool
    current_version: int
    duplicate: bool = False
    late: bool = False  # carried into the next round (late_uploads="carry")


@dataclass(frozen=True)
class Participant:
    learner_id: str
    incarnation: str
    weight: float
    c_steps: int
    c_tokens: int
    base_version: int
    round: int = 0
    drift: float = 0.0  # its pull from the rounds' medians after this merge (trainer.core.drift), lr per step


@dataclass(frozen=True)
class MergeRecord:
    """What one merge did; becomes a ``merge`` event."""

    fragment: int
    version: int
    base_version: int
    participants: tuple[Participant, ...]
    rule: str
    opened_at: float
    quorum_at: float | None
    merged_at: float
    outer_grad_norm: float
    merges_total: int
    round: int = 0
    late: int = 0  # contributions carried in late (late_uploads="carry")
    held: int = (
        0  # contributions whose body came after quorum + grace, their header before (trainer.core.inflight)
    )
    held_s: float = 0.0  # how long past quorum + grace the last of those came
    eligible_at: float | None = None  # since when it could merge by quorum and opening (Round.eligible_since)
    audit: MergeAudit | None = field(default=None, compare=False, repr=False)  # what it consumed and produced
    # What decided its timing (the merge audit checks it against quorum and grace): contributions and active learners
    # when it merged, and the moving averages the grace window is computed from (t_step, t_quorum, t_upload,
    # t_merge, t_broadcast), as the core held them; and with grace_waits_for heard how many learners it waited for
    # (trainer.core.grace.waited_for; None: every active one).
    decision: tuple[int, int, tuple[float, ...], int | None] | None = None


@dataclass(frozen=True)
class JoinResult:
    incarnation_index: int
    versions: tuple[int, ...]
    rejoined: bool  # same learner id seen before
    clock: tuple[float, float] = (0.0, 0.0)  # (cluster step, pace in seconds per step; 0 while idle)
