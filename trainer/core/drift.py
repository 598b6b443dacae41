"""Drift: how far one learner's contributions pull, summed over rounds, from the rounds' other participants.

Each round is bounded alone (``value``: no coordinate moves further than its steps of AdamW can), so a learner can
push the model a little in one direction every round and pass every round's check. What tells a push from honest
noise is the sum over rounds. Each merge with at least :data:`MIN_PARTICIPANTS` participants gives each
participant ``j`` its deviation per coordinate: its update per step less what the others did per step over the
same span of training, in units of the inner learning rate (one AdamW step moves a coordinate by about ``lr``)::

    d_j = (c_j / steps_j − m̄_j) / lr,     m̄_j = Σ_u typ_u · med_u / Σ_u typ_u

where ``med_u`` is merge ``u``'s coordinate-wise median of its participants' updates per step, ``typ_u`` their
median steps, and ``u`` runs over this merge and the fragment's earlier measured merges made since ``j``'s base
version (:class:`MergeMedian`). A learner that trained from the current version is compared with this merge's
median alone. One whose upload was delayed (a slow link, refused uploads) trained from an older base over several
rounds, and is compared with the medians of those rounds: this round's median extrapolated over five rounds'
steps would carry five times one round's noise and trend, where five rounds' noise adds up like √5. Measured, that
changed little (docs/security.md, ``drift``): what keeps the bound off by default is uploads of many steps against
peers' few, which 1–2 steps of reference cannot judge — honest ones pulled up to 31 · √W in deterministic mode
(throttle-all) and 4.8 · √W on real learners.

Scaled by its share of this merge, a deviation is its pull on the merged update (1 × d_j when it weighs and steps
like the others; a learner that uploads five rounds' steps at once carries five times the update at most of the
merge's weight, and pulls that much more — measured: a pusher whose uploads were refused came back with ~30 steps
where the others had 6, at 0.8 of the merge's weight)::

    pull_j = n · w_j · (steps_j / median_k steps_k) · d_j          (n participants, w_j its merge weight)

The median, not the mean: an insider's push moves the mean of the others (with three participants each honest one
would show half of it, and be refused with it) but not the median. Per fragment and learner id a leaky sum keeps a
window of about ``W`` of the fragment's merges; every merge of the fragment leaks every learner's sum, so a learner
that is refused (or away) sees its sum decay::

    D_j ← (1 − 1/W) · D_j + pull_j   (0 when j is not measured in this merge)      drift_j = max |D_j|

Deviations that change sign from round to round keep ``drift`` near ``√W`` times their size; a steady push of
``a`` per step grows it to ``W · a``. A learner whose drift is above ``k · √W`` is refused (``drift``) until the
leak brings it back under. With two participants the deviations are each other's negatives (nobody can tell who
pulled), and with one there is nobody to compare with: nothing is added, and the merge is no reference.

Example:
    >>> import numpy as np
    >>> ups = [{"w": np.array([1.0, 0.0])}, {"w": np.array([1.5, 0.0])}, {"w": np.array([9.0, 0.0])}]
    >>> alike = [Taking(lid, u, 1, 1 / 3, 0) for lid, u in zip("abc", ups)]   # the third pulls coordinate 0
    >>> sums, made = after_merge({}, alike, lr=1.0, window=2.0, version=1)
    >>> [sums[lid]["w"].tolist() for lid in "abc"], made.per_step["w"].tolist()
    ([[-0.5, 0.0], [0.0, 0.0], [7.5, 0.0]], [1.5, 0.0])
    >>> for v in (2, 3):
    ...     sums, _ = after_merge(sums, [t._replace(base=v - 1) for t in alike], lr=1.0, window=2.0, version=v)
    >>> round(drift_of(sums["c"]), 4), drift_of(sums["b"])        # 7.5 + 7.5/2 + 7.5/4
    (13.125, 0.0)
    >>> round(drift_of(after_merge(sums, alike[:2], lr=1.0, window=2.0, version=4)[0]["c"]), 4)  # not in it: decays
    6.5625
    >>> batched = [*alike[:2], Taking("c", {"w": 3 * ups[2]["w"]}, 3, 0.6, 0)]
    >>> round(drift_of(after_merge({}, batched, lr=1.0, window=2.0, version=1)[0]["c"]), 4)  # 3 rounds' steps at once
    40.5

A lump from an older base is compared with the rounds it covers: the others moved coordinate 0 by 4 per step, then
by 0, now by 1; a learner that trained from version 0 through all three rounds moved it by 5 in its 3 steps, as
they did, and pulls nothing — against this round's median alone it would pull 3 · 0.6 · 3 · (5/3 − 1)::

    >>> hist = [MergeMedian(1, {"w": np.array([4.0])}, 1.0), MergeMedian(2, {"w": np.array([0.0])}, 1.0)]
    >>> now = [Taking("a", {"w": np.array([1.0])}, 1, 0.2), Taking("b", {"w": np.array([1.0])}, 1, 0.2),
    ...        Taking("late", {"w": np.array([5.0])}, 3, 0.6, base=0)]
    >>> round(abs(float(after_merge({}, now, lr=1.0, window=2.0, version=3, history=hist)[0]["late"]["w"][0])), 4)
    0.0
    >>> round(float(after_merge({}, now, lr=1.0, window=2.0, version=3)[0]["late"]["w"][0]), 4)
    3.6
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from trainer.core.reasons import Rejected, RejectReason

Tensors = Mapping[str, np.ndarray]
MIN_PARTICIPANTS = 3  # with two, each one's deviation is the other's negative
DRIFT_WINDOW = 16.0  # merges of a fragment
# The bound when enforced (syncer.drift_k; off by default): honest real learners reached 4.8 over throttled links
# (about 1 otherwise), and in deterministic mode uploads of many steps against peers' few, at most of a merge's
# weight, pulled up to 31 (benchmarks/results/drift_bound*.json; docs/security.md, "Drift on honest learners").
DRIFT_K = 5.0
NETWORK_ROWS = 8  # participants up to which coordinate_median sorts with a network (its cost grows as n²)


class Taking(NamedTuple):
    """One participant of a merge, as the drift sums see it."""

    learner_id: str
    update: Tensors  # its own update, not rebased: what it trained
    steps: int
    weight: float  # its share of the merge's weight
    base: int = 0  # the version it trained from


@dataclass(frozen=True)
class MergeMedian:
    """What one measured merge's participants did per step: the reference of later lumps that trained through it."""

    version: int  # the version the merge made
    per_step: dict[str, np.ndarray]  # the coordinate-wise median of the participants' updates per step
    steps: float  # their median steps


def after_merge(
    sums: Mapping[str, Tensors],
    participants: Sequence[Taking],
    lr: float,
    window: float,
    version: int,
    history: Sequence[MergeMedian] = (),
) -> tuple[dict[str, dict[str, np.ndarray]], MergeMedian | None]:
    """One fragment's sums by learner id after the merge of ``participants`` that makes ``version``, and that merge's
    :class:`MergeMedian` (None: too few participants to measure). Every sum is leaked by ``1 − 1/window``; with
    enough participants each one's pull is added, its reference the medians of ``history`` (the fragment's earlier
    measured merges) made since its base, and this merge's."""
    keep = np.float32(1.0 - 1.0 / window)
    out = {lid: {n: keep * v for n, v in total.items()} for lid, total in sums.items()}
    if len(participants) < MIN_PARTICIPANTS or lr <= 0:
        return out, None
    steps = [max(p.steps, 1) for p in participants]
    typical = float(np.median(steps))
    rows = [{n: np.asarray(t, np.float32) / s for n, t in p.update.items()} for p, s in zip(participants, steps)]
    with np.errstate(over="ignore", invalid="ignore"):  # an unchecked garbage update (guards off) sums to inf
        made = MergeMedian(version, {n: coordinate_median([r[n] for r in rows]) for n in rows[0]}, typical)
        refs: dict[int, dict[str, np.ndarray]] = {}  # by base version: participants from one base share a span
        for p, s, row in zip(participants, steps, rows):
            if p.base not in refs:
                span = [h for h in history if h.version > p.base] + [made]
                refs[p.base] = made.per_step if len(span) == 1 else _mean_per_step(span)
            ref = refs[p.base]
            scale = np.float32(len(participants) * p.weight * s / typical / lr)
            pull = {n: ((row[n] - ref[n]) * scale).astype(np.float32) for n in row}
            total = out.get(p.learner_id)
            out[p.learner_id] = pull if total is None else {n: total[n] + pull[n] for n in pull}
    return out, made


def _mean_per_step(span: Sequence[MergeMedian]) -> dict[str, np.ndarray]:
    """The medians per step of ``span``'s merges, each weighted by its median steps: the others' pace over it."""
    steps = sum(m.steps for m in span)
    return {
        n: sum((np.float32(m.steps / steps) * m.per_step[n] for m in span), np.zeros_like(span[0].per_step[n]))
        for n in span[0].per_step
    }


def kept_history(history: Sequence[MergeMedian], made: MergeMedian | None, oldest_base: int) -> list[MergeMedian]:
    """``history`` with ``made`` added, less the merges no acceptable base can precede (made at or before
    ``oldest_base``, the oldest base version an upload may still have)."""
    kept = [h for h in history if h.version > oldest_base]
    return kept + [made] if made is not None else kept


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
