"""What a syncer checkpoint holds besides its tensors: one typed record, its JSON form and its digest.

The syncer state (``trainer.core.syncer_state``) writes it with every checkpoint and reads it back on a restore;
the merge audit compares a restored state's digest with the checkpoint's, so a field left out of the restore path
shows (``state_digest`` on ``checkpoint`` and ``restore`` events). Reading is lenient about fields a checkpoint
from an older version lacks (each has the value a fresh syncer starts with) and strict about the shape of what is
there: a wrong fragment count is refused, naming the field.

Example:
    >>> m = CheckpointMeta(versions=(3, 2), merges_total=5, last_round=(3, 2))
    >>> CheckpointMeta.from_json(m.to_json(), num_fragments=2) == m
    True
    >>> m.digest() == CheckpointMeta.from_json({**m.to_json(), "versions": [10, 9]}, 2).digest(version_skip=7)
    True
    >>> CheckpointMeta.from_json({"versions": [1], "merges_total": 0}, num_fragments=2)
    Traceback (most recent call last):
    ...
    ValueError: checkpoint has 1 fragments, the config 2
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

Key = tuple[str, str, int, int, int]  # one upload: learner, incarnation, fragment, base version, round


@dataclass(frozen=True)
class CheckpointMeta:
    versions: tuple[int, ...]
    merges_total: int
    incarnation_counts: Mapping[str, int] = field(default_factory=dict)
    tokens_by_incarnation: Mapping[str, int] = field(default_factory=dict)
    stopped: bool = False  # on disk "finished", the name checkpoints were written with
    merged_norms: tuple[Mapping[str, float], ...] | None = None  # None: from before per-learner references
    merged_keys: frozenset[Key] = frozenset()
    clock: tuple[float | None, float, float] = (None, 0.0, 0.0)  # the step clock: anchor time, anchor step, pace
    last_round: tuple[int, ...] = ()  # () with versions: every fragment at -1 (none merged on the clock)
    late_carried: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON object a checkpoint stores (its keys and their order are the digest's input too)."""
        return {
            "versions": list(self.versions),
            "merges_total": self.merges_total,
            "incarnation_counts": dict(self.incarnation_counts),
            "tokens_by_incarnation": dict(self.tokens_by_incarnation),
            "finished": self.stopped,
            "merged_norms": [dict(r) for r in self.merged_norms or ()],
            "merged_keys": sorted([list(k) for k in self.merged_keys]),
            "clock": list(self.clock),
            "last_round": list(self.last_round or [-1] * len(self.versions)),
            "late_carried": self.late_carried,
        }

    def digest(self, version_skip: int = 0) -> str:
        """Digest of everything it holds, its versions less ``version_skip`` (a restore's skip undone)."""
        meta = replace(self, versions=tuple(v - version_skip for v in self.versions)).to_json()
        return hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]

    @classmethod
    def from_json(cls, meta: Mapping[str, Any], num_fragments: int) -> CheckpointMeta:
        """Read a checkpoint's metadata for a config of ``num_fragments`` fragments (see the module docstring)."""
        versions = tuple(int(v) for v in meta["versions"])
        if len(versions) != num_fragments:
            raise ValueError(f"checkpoint has {len(versions)} fragments, the config {num_fragments}")
        last_round = tuple(int(r) for r in meta.get("last_round", [-1] * num_fragments))
        if len(last_round) != num_fragments:
            raise ValueError(f"checkpoint has {len(last_round)} fragments' rounds, the config {num_fragments}")
        anchor_time, anchor_step, pace = meta.get("clock", [None, 0.0, 0.0])
        norms = meta.get("merged_norms")  # absent in checkpoints from before per-learner references: start empty
        merged_norms = (
            tuple({str(k): float(x) for k, x in r.items()} for r in norms)
            if isinstance(norms, list) and len(norms) == num_fragments and all(isinstance(r, dict) for r in norms)
            else None
        )
        return cls(
            versions=versions,
            merges_total=int(meta["merges_total"]),
            incarnation_counts={k: int(v) for k, v in meta.get("incarnation_counts", {}).items()},
            tokens_by_incarnation={k: int(v) for k, v in meta.get("tokens_by_incarnation", {}).items()},
            stopped=bool(meta.get("finished", False)),
            merged_norms=merged_norms,
            merged_keys=frozenset(
                (str(a), str(b), int(c), int(d), int(e)) for a, b, c, d, e in meta.get("merged_keys", [])
            ),
            clock=(None if anchor_time is None else float(anchor_time), float(anchor_step), float(pace)),
            last_round=last_round,
            late_carried=int(meta.get("late_carried", 0)),
        )
