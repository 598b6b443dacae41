"""What an upload must satisfy before it joins a round: its version, its round, its tensors' layout, its values
and its size. Each check is a pure function of what the syncer knows and raises
:class:`~trainer.core.reasons.Rejected` naming what is wrong; :class:`~trainer.core.syncer_state.SyncerState`
runs them in order (header first, body after), before it touches anything, so a refused upload changes nothing.

Example:
    >>> check_base(0, base_version=2, current=5, max_staleness=2, rebases=False, held=False)
    Traceback (most recent call last):
    ...
    trainer.core.reasons.Rejected: stale_version: fragment 0 is at version 5; base 2 is more than 2 versions old — fetch the current fragment
    >>> check_round(0, 3, now_round=1, last_round=0, late_uploads="refuse")
    Traceback (most recent call last):
    ...
    trainer.core.reasons.Rejected: future_round: fragment 0 is in round 1 on the syncer's clock; round 3 has not opened — sync on the step clock the syncer's replies carry
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trainer.core import claims
from trainer.core.merge import fragment_norm
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_records import Specs

__all__ = ["check_base", "check_finite", "check_layout", "check_norm", "check_round", "per_step_norm"]


def check_base(
    fragment: int, base_version: int, current: int, max_staleness: int, rebases: bool, held: bool
) -> None:
    """The version the upload was made from: issued, at most ``max_staleness`` old, and (where uploads are rebased)
    one whose value the syncer still ``held``."""
    if base_version < current - max_staleness:
        raise Rejected(
            RejectReason.STALE_VERSION,
            f"fragment {fragment} is at version {current}; base {base_version} is more than "
            f"{max_staleness} versions old — fetch the current fragment",
        )
    if base_version > current:
        raise Rejected(
            RejectReason.FUTURE_VERSION,
            f"fragment {fragment} is at version {current}; base {base_version} was never issued",
        )
    if rebases and base_version != current and not held:
        raise Rejected(
            RejectReason.STALE_VERSION,
            f"fragment {fragment} is at version {current}; the syncer no longer holds base "
            f"{base_version} to rebase onto (it restarted) — fetch the current fragment",
        )


def check_round(fragment: int, r: int, now_round: int, last_round: int, late_uploads: str) -> None:
    """The round an upload names, on the syncer's clock: opened (or the next), and not merged when late uploads are
    refused."""
    if r < 0:
        raise Rejected(RejectReason.MALFORMED, f"round {r} of fragment {fragment} must be >= 0")
    if r > now_round + 1:
        raise Rejected(
            RejectReason.FUTURE_ROUND,
            f"fragment {fragment} is in round {now_round} on the syncer's clock; round {r} has not "
            "opened — sync on the step clock the syncer's replies carry",
        )
    if r <= last_round and late_uploads == "refuse":
        raise Rejected(
            RejectReason.LATE_ROUND,
            f"round {r} of fragment {fragment} has merged (last merged round "
            f"{last_round}); a late upload misses its merge — fetch the current fragment",
        )


def check_layout(fragment: int, specs: Mapping[str, tuple[tuple[int, ...], str]], expected: Specs) -> None:
    """The tensors the header declares: the fragment's names, shapes and dtypes."""
    if set(specs) != set(expected):
        raise Rejected(
            RejectReason.BAD_SHAPE,
            f"fragment {fragment} holds tensors {sorted(expected)}, upload names {sorted(specs)}",
        )
    for n, (shape, dtype) in specs.items():
        if tuple(shape) != expected[n][0]:
            raise Rejected(
                RejectReason.BAD_SHAPE, f"tensor {n!r} has shape {tuple(shape)}, expected {expected[n][0]}"
            )
        if dtype != expected[n][1]:
            raise Rejected(RejectReason.BAD_DTYPE, f"tensor {n!r} has dtype {dtype}, expected {expected[n][1]}")


def check_finite(fragment: int, tensors: Mapping[str, np.ndarray]) -> None:
    """No NaN or infinity in the body."""
    for n, t in tensors.items():
        if not np.all(np.isfinite(t)):
            raise Rejected(RejectReason.NON_FINITE, f"tensor {n!r} of fragment {fragment} contains NaN or Inf")


def per_step_norm(tensors: dict[str, np.ndarray], c_steps: int) -> float:
    """An update's norm per step it covers: what the outlier guard compares and the merged-norm history keeps."""
    return fragment_norm(tensors) / max(c_steps, 1)


def check_coordinates(
    fragment: int,
    tensors: Mapping[str, np.ndarray],
    c_steps: int,
    glob: Mapping[str, np.ndarray],
    inner_lr: float,
    inner_weight_decay: float,
    step_bound: float = claims.ADAM_STEP_BOUND,
) -> None:
    """No coordinate moved further than ``c_steps`` inner AdamW steps can move it (docs/security.md, ``value``).

    One AdamW step moves coordinate i by at most ``lr · (K + wd·|θᵢ|)`` (``step_bound`` K: ADAM_STEP_BOUND,
    trainer.core.claims), so ``|Δᵢ| ≤ c_steps · lr · (K + wd·|θᵢ|)``, ``θ`` the global value. The fragment's L2 bound alone let
    one coordinate take the whole fragment's budget (√n times what a step can move it); this bound implies the
    same per tensor. Honest uploads of the small preset on real text stay below 0.8 · lr per step per coordinate
    (676 uploads of 20 runs: 12× inside the bound).

    >>> g = {"w": np.zeros(4, np.float32)}
    >>> check_coordinates(0, {"w": np.array([0.02, 0, 0, 0], np.float32)}, 1, g, 1e-3, 0.0)  # 20 × lr: refused
    Traceback (most recent call last):
    trainer.core.reasons.Rejected: outlier_norm: coordinate 0 of tensor 'w' (fragment 0) moved 0.02 over 1 steps; 1 inner AdamW step (lr 0.001) moves one at most 0.01: a diverged or corrupt learner?
    >>> check_coordinates(0, {"w": np.array([0.02, 0, 0, 0], np.float32)}, 2, g, 1e-3, 0.0)  # over 2 steps: fine
    """
    for n, t in tensors.items():
        if not t.size:
            continue
        excess = np.abs(t) / max(c_steps, 1) - inner_lr * inner_weight_decay * np.abs(glob[n])
        i = int(np.argmax(excess))
        if excess.flat[i] > inner_lr * step_bound:
            theta = float(np.abs(glob[n]).flat[i])
            bound = c_steps * inner_lr * (step_bound + inner_weight_decay * theta)
            raise Rejected(
                RejectReason.OUTLIER_NORM,
                f"coordinate {i} of tensor {n!r} (fragment {fragment}) moved {float(np.abs(t).flat[i]):.3g} over "
                f"{c_steps} steps; {c_steps} inner AdamW step{'s' if c_steps != 1 else ''} (lr {inner_lr:g}) "
                f"move{'s' if c_steps == 1 else ''} one at most {bound:.3g}: a diverged or corrupt learner?",
            )


def check_norm(
    fragment: int,
    tensors: dict[str, np.ndarray],
    c_steps: int,
    glob: dict[str, np.ndarray],
    inner_lr: float,
    inner_weight_decay: float,
    merged_norms: Mapping[str, float],
    num_learners: int,
    ratio: float,
    coordinate_step_bound: float = claims.ADAM_STEP_BOUND,
) -> None:
    """Refuse finite garbage: an update larger than an inner step can make, or than other learners' merged ones.

    NaN checks alone let through corrupted memory (finite values of absurd magnitude), which the merge would spread
    into the global model. Honest updates grow with the steps they cover, so both bounds are per step
    (:func:`per_step_norm` of ``tensors`` over ``c_steps``, the steps capped by time, trainer.core.claims): what one inner AdamW step can move the fragment (``glob``,
    its global value; known from the config: no learner's history steers it, and zero updates cannot switch it
    off), and ``ratio`` (``max_norm_ratio``) × the median over learners of each one's latest merged update (one
    value per learner: a single learner cannot drag it up or down). ``ratio`` 0 switches both off.
    """
    if ratio <= 0:
        return
    norm = per_step_norm(tensors, c_steps)
    if inner_lr > 0:
        check_coordinates(fragment, tensors, c_steps, glob, inner_lr, inner_weight_decay, coordinate_step_bound)
        bound = claims.adam_step_norm_bound(
            inner_lr, sum(t.size for t in glob.values()), inner_weight_decay, fragment_norm(glob)
        )
        if norm > bound:
            raise Rejected(
                RejectReason.OUTLIER_NORM,
                f"update of fragment {fragment} has norm {norm:.3g} per step over {c_steps} steps; "
                f"one inner AdamW step (lr {inner_lr:g}) moves it at most {bound:.3g}: a "
                "diverged or corrupt learner?",
            )
    ref = claims.reference_norm(merged_norms, num_learners)
    if ref is not None and ref > 0 and norm > ratio * ref:
        raise Rejected(
            RejectReason.OUTLIER_NORM,
            f"update of fragment {fragment} has norm {norm:.3g} per step, more than {ratio:g}× "
            f"the learners' median merged {ref:.3g}: a diverged or corrupt learner? "
            "(syncer.max_norm_ratio)",
        )
