"""What one merge consumed and produced, for the merge audit (a model check of every merge).

The syncer's core fills a :class:`MergeAudit` on every merge; the shells (the gRPC syncer, deterministic mode) keep
its tensors in the run directory (``audit/``, :mod:`trainer.audit_log`) and put their digests in the ``merge``
event. A checker written apart from this package (``chaos/checkers/merge_reference.py``, plain numpy from the
equations in docs/trainer.md) recomputes the merge and compares; the digests chain every merge of a fragment to the
one before, to checkpoints, restores and the values learners hold.

Digest: SHA-256 over each tensor in name order — its name, dtype, shape and C-order bytes — the first 32 hex digits
(docs/events.md; the checker recomputes it on its own):

    >>> import numpy as np
    >>> digest({"w": np.zeros(2, np.float32)}) == digest({"w": np.zeros(2, np.float32).copy()})
    True
    >>> digest({"w": np.zeros(2, np.float32)}) == digest({"w": np.zeros(2, np.float64)})
    False
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

Tensors = dict[str, np.ndarray]


def digest(tensors: Mapping[str, Any]) -> str:
    """The tensors' digest (see the module's docstring); empty mappings have one too."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name]))
        h.update(f"{name}|{a.dtype.str}|{','.join(map(str, a.shape))}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def optimizer_leaves(state: Any) -> Tensors:
    """An optimizer state's arrays by name: ``momentum/<tensor>`` for the SGD momentum trace (optax ``TraceState``),
    the leaf's tree path for anything else (AdamW's ``mu``/``nu``/``count``).

    >>> from trainer.core.outer import outer_optimizer
    >>> st = outer_optimizer(0.7, 0.9, True).init({"w": np.zeros(2, np.float32)})
    >>> sorted(optimizer_leaves(st))
    ['momentum/w']
    >>> optimizer_leaves(outer_optimizer(0.7, 0.0, False).init({"w": np.zeros(2, np.float32)}))
    {}
    """
    out: Tensors = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        attrs = [k.name for k in path if isinstance(k, jax.tree_util.GetAttrKey)]
        keys = [str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey)]
        name = f"momentum/{keys[-1]}" if attrs[-1:] == ["trace"] and keys else jax.tree_util.keystr(path)
        out[name] = np.asarray(leaf)
    return out


@dataclass(frozen=True)
class MergeAudit:
    """The inputs and outputs of one merge of one fragment (arrays are the core's own: read, never mutate).

    ``uploads[i]`` is participant i's outer gradient as uploaded (against its ``base_version``); where that base is
    not the round's start, ``anchors[i]`` is the syncer's value of that base version (the rebase:
    Θ(start) − Θ(base) + upload), else None. ``scale`` multiplies the optimizer's update (1 for the Nesterov step).
    """

    fragment: int
    start_version: int
    version: int
    base: Tensors
    uploads: tuple[Tensors, ...]
    anchors: tuple[Tensors | None, ...]
    opt_before: Tensors
    opt_after: Tensors
    delta: Tensors
    result: Tensors
    scale: float

    def digests(self) -> dict[str, Any]:
        """Every part's digest, as the ``merge`` event carries them."""
        return {
            "base": digest(self.base),
            "uploads": [digest(u) for u in self.uploads],
            "anchors": [None if a is None else digest(a) for a in self.anchors],
            "opt_before": digest(self.opt_before),
            "opt_after": digest(self.opt_after),
            "delta": digest(self.delta),
            "result": digest(self.result),
        }

    def arrays(self) -> Tensors:
        """Every tensor under one flat name (``base/w``, ``upload/0/w``, ``anchor/1/w``, ``opt_after/momentum/w`` …),
        the layout of an audit file."""
        out: Tensors = {}
        for part, tensors in (
            ("base", self.base),
            ("opt_before", self.opt_before),
            ("opt_after", self.opt_after),
            ("delta", self.delta),
            ("result", self.result),
        ):
            out.update({f"{part}/{n}": t for n, t in tensors.items()})
        for i, (u, a) in enumerate(zip(self.uploads, self.anchors)):
            out.update({f"upload/{i}/{n}": t for n, t in u.items()})
            if a is not None:
                out.update({f"anchor/{i}/{n}": t for n, t in a.items()})
        return {n: np.asarray(t) for n, t in out.items()}
