"""Token weights and merge rules for outer gradients.

A learner's outer gradient for fragment p is ``v = Θ_p − θ_p``: the global
value it started from minus its local value now. Contributions are weighted by
``w = c_tokens · (c_tokens / c_steps)`` ("quantity × quality") and merged by

- ``mean``: Σ w·v / Σ w, or
- ``rda`` (Radial-Directional Averaging): (Σ w‖v‖ / Σ w) · unit(Σ w·unit(v) / Σ w),
  with unit(0) = 0 — the merged norm does not shrink like 1/√M for nearly
  orthogonal updates, as a plain mean does.

The rule is a property of the tensor, not of the fragment that holds it
(:func:`merge_fragment`): embedding tables are always mean-merged (most of
their rows get no gradient from a given learner, so RDA's norm rescaling would
inflate the rows one learner touched), every other tensor of the fragment by
the run's rule, with RDA's norms taken over those tensors together. If every
weight is zero (no counted steps) the contributions are weighted equally.

Example:
    >>> import numpy as np
    >>> v1, v2 = {"w": np.array([1.0, 0.0])}, {"w": np.array([0.0, 1.0])}
    >>> merge_outer_gradients([v1, v2], [1.0, 1.0], "mean")["w"].tolist()
    [0.5, 0.5]
    >>> out = merge_outer_gradients([v1, v2], [1.0, 1.0], "rda")["w"]
    >>> round(float(np.linalg.norm(out)), 6)
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import numpy as np

Tensors = dict[str, np.ndarray]
MergeRule = Literal["mean", "rda"]
MERGE_RULES: tuple[str, ...] = ("mean", "rda")


Weighting = Literal["tokens", "uniform"]


def token_weight(c_tokens: int, c_steps: int, weighting: Weighting = "tokens") -> float:
    """w = c_tokens² / c_steps (``uniform``: 1); 0 for a contribution with no counted steps or tokens.

    >>> token_weight(100, 10), token_weight(100, 10, "uniform"), token_weight(0, 10, "uniform")
    (1000.0, 1.0, 0.0)
    """
    if c_steps <= 0 or c_tokens <= 0:
        return 0.0
    return 1.0 if weighting == "uniform" else float(c_tokens) * (float(c_tokens) / float(c_steps))


def fragment_norm(tensors: Tensors) -> float:
    """L2 norm of all tensors of a fragment taken as one vector (in float64: float32 squares overflow at 1.8e19).

    >>> fragment_norm({"w": np.full(4, 1e20, np.float32)}) > 1e20
    True
    """
    total = 0.0
    for t in tensors.values():
        t64 = np.asarray(t, dtype=np.float64).ravel()
        total += float(np.dot(t64, t64))
    return float(np.sqrt(total))


def _normalised(weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0:
        raise ValueError("need at least one weight")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and >= 0, got {w.tolist()}")
    total = w.sum()
    return np.full(len(w), 1.0 / len(w)) if total == 0 else w / total


def weighted_mean(vectors: Sequence[Tensors], weights: Sequence[float]) -> Tensors:
    """Σ w·v / Σ w, tensor by tensor."""
    w = _normalised(weights)
    names = vectors[0].keys()
    # vectors is not empty (names come from its first): each sum is an array, never sum()'s start 0.
    return {
        n: cast(np.ndarray, sum(float(wi) * v[n].astype(np.float64) for wi, v in zip(w, vectors))).astype(
            vectors[0][n].dtype
        )
        for n in names
    }


def rda(vectors: Sequence[Tensors], weights: Sequence[float]) -> Tensors:
    """Radial-Directional Averaging: mean norm times the direction of the mean unit vector."""
    w = _normalised(weights)
    norms = [fragment_norm(v) for v in vectors]
    radius = float(sum(wi * ni for wi, ni in zip(w, norms)))
    # Unit vectors in float64: a norm beyond float32's range must not turn into inf (and the unit into 0).
    units = [
        {n: np.asarray(t, np.float64) / ni for n, t in v.items()}
        if ni > 0
        else {n: np.zeros(np.shape(t)) for n, t in v.items()}
        for v, ni in zip(vectors, norms)
    ]
    direction = weighted_mean(units, w.tolist())
    dnorm = fragment_norm(direction)
    if dnorm == 0:
        return {n: np.zeros_like(t) for n, t in vectors[0].items()}
    with np.errstate(over="ignore"):  # a radius beyond the dtype's range is inf: the syncer refuses that merge
        return {n: (t * (radius / dnorm)).astype(vectors[0][n].dtype) for n, t in direction.items()}


def outer_gradient(global_value: Tensors, local_value: Tensors) -> Tensors:
    """v = Θ − θ for one learner's fragment."""
    return {n: global_value[n] - local_value[n] for n in global_value}


def merge_fragment(
    vectors: Sequence[Tensors], weights: Sequence[float], rule: MergeRule, mean_tensors: Sequence[str] = ()
) -> Tensors:
    """Merge one fragment: tensors named in ``mean_tensors`` by weighted mean, the others by ``rule``.

    >>> v1 = {"embed": np.array([2.0, 0.0]), "w": np.array([1.0, 0.0])}
    >>> v2 = {"embed": np.array([0.0, 0.0]), "w": np.array([0.0, 1.0])}
    >>> out = merge_fragment([v1, v2], [1.0, 1.0], "rda", mean_tensors=("embed",))
    >>> out["embed"].tolist(), round(float(np.linalg.norm(out["w"])), 6)
    ([1.0, 0.0], 1.0)
    """
    names = list(vectors[0]) if vectors else []
    mean_part = [n for n in names if n in mean_tensors]
    rest = [n for n in names if n not in mean_tensors]
    out: Tensors = {}
    parts: tuple[tuple[list[str], MergeRule], ...] = ((mean_part, "mean"), (rest, rule))
    for part, part_rule in parts:
        if part:
            out.update(merge_outer_gradients([{n: v[n] for n in part} for v in vectors], weights, part_rule))
    return {n: out[n] for n in names}


def merge_rule_label(names: Sequence[str], rule: MergeRule, mean_tensors: Sequence[str] = ()) -> str:
    """How a fragment of these tensors is merged, for events: ``rda``, ``mean`` or ``rda+mean(embed)``.

    >>> merge_rule_label(["embed", "w"], "rda", ("embed",)), merge_rule_label(["w"], "rda", ("embed",))
    ('rda+mean(embed)', 'rda')
    """
    means = [n for n in names if n in mean_tensors]
    if rule == "mean" or len(means) == len(names):
        return "mean"
    return f"{rule}+mean({','.join(means)})" if means else rule


def merge_outer_gradients(vectors: Sequence[Tensors], weights: Sequence[float], rule: MergeRule) -> Tensors:
    """Merge outer gradients with the named rule."""
    if len(vectors) != len(weights) or not vectors:
        raise ValueError(f"got {len(vectors)} vectors and {len(weights)} weights; need equal and >= 1")
    if rule == "mean":
        return weighted_mean(vectors, weights)
    if rule == "rda":
        return rda(vectors, weights)
    raise ValueError(f"unknown merge rule {rule!r}; expected one of {MERGE_RULES}")
