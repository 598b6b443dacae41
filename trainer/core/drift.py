"""Drift: how far one learner's contributions pull, summed over rounds, from the rounds' other participants.

Each round is bounded alone (``value``: no coordinate moves further than its steps of AdamW can), so a learner can
push the model a little in one direction every round and pass every round's check. What tells a push from honest
noise is the sum over rounds. Each merge with at least :data:`MIN_PARTICIPANTS` participants gives each
participant ``j`` its deviation per coordinate: its update per step less the coordinate-wise median of every
participant's, in units of the inner learning rate (one AdamW step moves a coordinate by about ``lr``)::

    d_j = (c_j / steps_j − median_k (c_k / steps_k)) / lr

and, scaled by its share of this merge, its pull on the merged update (1 × d_j when it weighs and steps like the
others; a learner that uploads five rounds' steps at once carries five times the update at most of the merge's
weight, and pulls that much more — measured: a pusher whose uploads were refused came back with ~30 steps where the
others had 6, at 0.8 of the merge's weight)::

    pull_j = n · w_j · (steps_j / median_k steps_k) · d_j          (n participants, w_j its merge weight)

The median, not the mean: an insider's push moves the mean of the others (with three participants each honest one
would show half of it, and be refused with it) but not the median. Per fragment and learner id a leaky sum keeps a
window of about ``W`` of the fragment's merges; every merge of the fragment leaks every learner's sum, so a learner
that is refused (or away) sees its sum decay::

    D_j ← (1 − 1/W) · D_j + pull_j   (0 when j is not measured in this merge)      drift_j = max |D_j|

Deviations that change sign from round to round keep ``drift`` near ``√W`` times their size; a steady push of
``a`` per step grows it to ``W · a``. A learner whose drift is above ``k · √W`` is refused (``drift``) until the
leak brings it back under. With two participants the deviations are each other's negatives (nobody can tell who
pulled), and with one there is nobody to compare with: nothing is added.

Example:
    >>> import numpy as np
    >>> ups = [{"w": np.array([1.0, 0.0])}, {"w": np.array([1.5, 0.0])}, {"w": np.array([9.0, 0.0])}]
    >>> [d["w"].tolist() for d in deviations(ups, steps=[1, 1, 1], lr=1.0)]   # the third pulls coordinate 0
    [[-0.5, 0.0], [0.0, 0.0], [7.5, 0.0]]
    >>> deviations(ups[:2], steps=[1, 1], lr=1.0) is None
    True
    >>> alike = [("a", ups[0], 1, 1 / 3), ("b", ups[1], 1, 1 / 3), ("c", ups[2], 1, 1 / 3)]
    >>> sums = {}
    >>> for _ in range(3):
    ...     sums = after_merge(sums, alike, lr=1.0, window=2.0)
    >>> round(drift_of(sums["c"]), 4), drift_of(sums["b"])        # 7.5 + 7.5/2 + 7.5/4
    (13.125, 0.0)
    >>> round(drift_of(after_merge(sums, alike[:1], lr=1.0, window=2.0)["c"]), 4)   # a merge it is not in: decays
    6.5625
    >>> batched = [("a", ups[0], 1, 0.2), ("b", ups[1], 1, 0.2), ("c", {"w": 3 * ups[2]["w"]}, 3, 0.6)]
    >>> round(drift_of(after_merge({}, batched, lr=1.0, window=2.0)["c"]), 4)   # 3 rounds' steps at once: 3 · 0.6 · 3
    40.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from trainer.core.reasons import Rejected, RejectReason

Tensors = Mapping[str, np.ndarray]
MIN_PARTICIPANTS = 3  # with two, each one's deviation is the other's negative
DRIFT_WINDOW = 16.0  # merges of a fragment
# The bound when enforced (syncer.drift_k; off by default): honest learners reached 1.2 on the real system, but in
# deterministic mode uploads delayed by slow links, many steps at most of a merge's weight, pulled up to 31
# (benchmarks/results/drift_bound*.json; docs/security.md, "Drift on honest learners").
DRIFT_K = 5.0
NETWORK_ROWS = 8  # participants up to which coordinate_median sorts with a network (its cost grows as n²)


def deviations(updates: Sequence[Tensors], steps: Sequence[int], lr: float) -> list[dict[str, np.ndarray]] | None:
    """Each participant's update per step less the coordinate-wise median of all of them, in units of ``lr``
    (None: fewer than :data:`MIN_PARTICIPANTS`, nothing to compare)."""
    if len(updates) < MIN_PARTICIPANTS or lr <= 0:
        return None
    per_step = [{n: np.asarray(t, np.float32) / max(s, 1) for n, t in u.items()} for u, s in zip(updates, steps)]
    out: list[dict[str, np.ndarray]] = [{} for _ in updates]
    with np.errstate(over="ignore", invalid="ignore"):  # an unchecked garbage update (guards off) sums to inf
        for n in per_step[0]:
            rows = [u[n] for u in per_step]
            med = coordinate_median(rows)
            for j, row in enumerate(rows):
                out[j][n] = (row - med) / np.float32(lr)
    return out


def coordinate_median(rows: Sequence[np.ndarray]) -> np.ndarray:
    """The coordinate-wise median of a few equally shaped arrays, exactly ``np.median(np.stack(rows), axis=0)``.

    Why not that: the syncer's driver computes it on every merge over whole fragments, and numpy's median along a
    short first axis took 28 ms for three rows of 0.8M floats (the outer step itself takes 1.6 ms); an odd-even
    transposition network of elementwise minima and maxima sorts the rows in place of each coordinate, ~5× faster
    up to :data:`NETWORK_ROWS` rows.

    >>> coordinate_median([np.array([3.0, 1.0]), np.array([1.0, 5.0]), np.array([2.0, 2.0])]).tolist()
    [2.0, 2.0]
    >>> coordinate_median([np.array([4.0]), np.array([1.0]), np.array([2.0]), np.array([8.0])]).tolist()
    [3.0]
    """
    n = len(rows)
    if n > NETWORK_ROWS:
        return np.median(np.stack(rows), axis=0)
    r = list(rows)
    for i in range(n):  # n rounds of odd-even transposition sort every coordinate's n values
        for j in range(i % 2, n - 1, 2):
            r[j], r[j + 1] = np.minimum(r[j], r[j + 1]), np.maximum(r[j], r[j + 1])
    mid = (n - 1) // 2
    return r[mid] if n % 2 else (r[mid] + r[mid + 1]) / r[mid].dtype.type(2)


def after_merge(
    sums: Mapping[str, Tensors],
    participants: Sequence[tuple[str, Tensors, int, float]],
    lr: float,
    window: float,
) -> dict[str, dict[str, np.ndarray]]:
    """One fragment's sums by learner id after a merge of ``participants`` (learner id, update, steps, its weight
    in the merge): every sum leaked by ``1 − 1/window``, each participant's pull added when there are enough to
    compare."""
    keep = np.float32(1.0 - 1.0 / window)
    out = {lid: {n: keep * v for n, v in total.items()} for lid, total in sums.items()}
    steps = [max(s, 1) for _, _, s, _ in participants]
    devs = deviations([u for _, u, _, _ in participants], steps, lr)
    typical = float(np.median(steps))
    with np.errstate(over="ignore", invalid="ignore"):  # an unchecked garbage update (guards off): inf, refused
        for (lid, _, s, w), d in zip(participants, devs or ()):
            share = np.float32(len(participants) * w * s / typical)
            total = out.get(lid)
            pull = {n: (share * v).astype(np.float32) for n, v in d.items()}
            out[lid] = pull if total is None else {n: total[n] + pull[n] for n in pull}
    return out


def drift_of(total: Tensors | None) -> float:
    """The largest |D| over the coordinates (0 for no sum yet; infinite where a sum is not finite, so that it can
    only be refused)."""
    if not total:
        return 0.0
    largest = float(max(np.max(np.abs(v)) if v.size else 0.0 for v in total.values()))
    return largest if math.isfinite(largest) else math.inf


def drift_bound(k: float, window: float) -> float:
    """``k · √W``: what deviations that change sign from round to round stay under."""
    return k * float(np.sqrt(window))


def check_drift(fragment: int, learner_id: str, drift: float, bound: float) -> None:
    """Refuse an upload of a learner whose summed pull on ``fragment`` is above ``bound``."""
    if drift > bound:
        raise Rejected(
            RejectReason.DRIFT,
            f"learner {learner_id!r} has pulled fragment {fragment} away from the other participants by "
            f"{drift:.3g} lr per step summed over its recent merges (bound {bound:.3g}); its uploads are refused "
            "until that decays — an honest learner far from the others has different data or settings",
        )
