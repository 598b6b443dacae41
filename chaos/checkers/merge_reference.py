"""An independent reference of one merge, in plain numpy, written from the equations in docs/trainer.md.

It imports nothing from ``trainer`` (tests/unit/test_merge_audit.py checks): a defect in the trainer's core cannot
hide by being shared with the check that recomputes it. Everything in float64; the trainer's float32 results must
agree up to float32 round-off (:func:`max_error`).

For a fragment with start value Θ, participants i with uploaded outer gradient u_i against base version b_i, the
syncer's value A_i of b_i where b_i is not the round's start, counters c_tokens_i and c_steps_i:

1. rebase: v_i = u_i + (Θ − A_i), or v_i = u_i when b_i is the start;
2. token weights: w_i = c_tokens_i² / c_steps_i (``uniform``: 1), 0 when either counter is 0, normalised; all zero →
   equal weights;
3. merge, per tensor: embedding tables by the weighted mean Σ w_i v_i; every other tensor by the run's rule —
   ``mean`` the same, ``rda`` over those tensors together: (Σ w_i ‖v_i‖) · d / ‖d‖ with d = Σ w_i v_i / ‖v_i‖
   (a zero v_i contributes nothing to d; d = 0 gives 0);
4. the outer step on Δ, SGD with Nesterov momentum μ and learning rate η, times the step's scale s:
   m' = Δ + μ m;  Θ' = Θ − s·η (Δ + μ m')   (plain momentum: Θ' = Θ − s·η m';  μ = 0: Θ' = Θ − s·η Δ, no state).

And when a round may merge (:func:`grace_s`): once K contributions are in and the round has opened, after the grace
window — none when every active learner is in — clamp(γ · (τ·t_step − (t_quorum + t_sync)), 0, cap·t_step), with
t_sync = t_upload + t_merge + t_broadcast and, for automatic τ, τ = max(τ_floor, ⌈(t_quorum + t_sync)/t_step⌉ + 1);
it waits at most a hold, max(3 t_upload, t_step), longer for bodies whose headers came in time.

    >>> import numpy as np
    >>> u = [{"w": np.array([1.0, 0.0])}, {"w": np.array([0.0, 1.0])}]
    >>> d = merged_delta(u, [None, None], {"w": np.zeros(2)}, [(10, 10), (10, 10)], "rda", ())
    >>> round(float(np.linalg.norm(d["w"])), 6)                     # RDA keeps the mean norm (1), a mean would not
    1.0
    >>> theta, m = outer_step({"w": np.array([1.0])}, {"momentum/w": np.zeros(1)}, {"w": np.array([0.5])},
    ...                       lr=0.7, momentum=0.9, nesterov=True, scale=1.0)
    >>> round(float(theta["w"][0]), 4), float(m["momentum/w"][0])   # 1 - 0.7 * (0.5 + 0.9 * 0.5)
    (0.335, 0.5)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np

Arrays = Mapping[str, np.ndarray]
F32_EPS = float(np.finfo(np.float32).eps)


def digest(tensors: Arrays) -> str:
    """SHA-256 over each tensor in name order — name, dtype, shape, C-order bytes —, the first 32 hex digits: the
    digest the events carry (docs/events.md), computed here on its own.

    >>> digest({"w": np.zeros(2, np.float32)})[:8]
    '6f27aee6'
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{a.dtype.str}|{','.join(str(d) for d in a.shape)}|".encode() + a.tobytes())
    return h.hexdigest()[:32]


def part(arrays: Arrays, name: str) -> dict[str, np.ndarray]:
    """One part of a kept merge's file (docs/events.md: ``base/<tensor>``, ``upload/<i>/<tensor>`` …), by tensor.

    >>> sorted(part({"upload/0/w": np.zeros(1), "upload/1/w": np.ones(1), "base/w": np.zeros(1)}, "upload/0"))
    ['w']
    """
    pre = name + "/"
    return {n[len(pre) :]: a for n, a in arrays.items() if n.startswith(pre)}


def _f64(tensors: Arrays) -> dict[str, np.ndarray]:
    return {n: np.asarray(t, dtype=np.float64) for n, t in tensors.items()}


def weights(counters: Sequence[tuple[int, int]], weighting: str = "tokens") -> np.ndarray:
    """Normalised token weights from (c_tokens, c_steps) pairs (``uniform``: equal where both counters are > 0).

    >>> weights([(100, 10), (100, 20)]).round(4).tolist()    # 1000 and 500
    [0.6667, 0.3333]
    >>> weights([(100, 10), (100, 20), (0, 3)], "uniform").tolist()
    [0.5, 0.5, 0.0]
    >>> weights([(0, 0), (0, 5)]).tolist()
    [0.5, 0.5]
    """
    one = (lambda t, s: 1.0) if weighting == "uniform" else (lambda t, s: t * t / s)
    w = np.array([one(t, s) if t > 0 and s > 0 else 0.0 for t, s in counters], dtype=np.float64)
    return np.full(len(w), 1.0 / len(w)) if w.sum() == 0 else w / w.sum()


def merged_delta(
    uploads: Sequence[Arrays],
    anchors: Sequence[Arrays | None],
    start: Arrays,
    counters: Sequence[tuple[int, int]],
    rule: str,
    mean_tensors: Sequence[str],
    weighting: str = "tokens",
) -> dict[str, np.ndarray]:
    """Δ for one fragment: rebase, weight, merge (steps 1–3 above)."""
    theta = _f64(start)
    vs = []
    for u, a in zip(uploads, anchors):
        u64 = _f64(u)
        vs.append(u64 if a is None else {n: u64[n] + (theta[n] - np.asarray(a[n], np.float64)) for n in u64})
    w = weights(counters, weighting)
    names = sorted(theta)
    means = [n for n in names if n in mean_tensors or rule == "mean"]
    rest = [n for n in names if n not in means]
    out = {n: sum(wi * v[n] for wi, v in zip(w, vs)) for n in means}
    if rest:
        norms = [np.sqrt(sum(float(np.sum(v[n] ** 2)) for n in rest)) for v in vs]
        radius = float(sum(wi * ni for wi, ni in zip(w, norms)))
        d = {
            n: sum(wi * v[n] / ni for wi, v, ni in zip(w, vs, norms) if ni > 0) + np.zeros_like(theta[n])
            for n in rest
        }
        dn = np.sqrt(sum(float(np.sum(d[n] ** 2)) for n in rest))
        out.update({n: d[n] * (radius / dn) if dn > 0 else np.zeros_like(theta[n]) for n in rest})
    return out


def outer_step(
    start: Arrays, opt_before: Arrays, delta: Arrays, *, lr: float, momentum: float, nesterov: bool, scale: float
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Θ' and the optimizer state after (step 4 above); the state holds ``momentum/<tensor>`` when μ > 0."""
    theta, d = _f64(start), _f64(delta)
    if momentum == 0:
        return {n: theta[n] - scale * lr * d[n] for n in theta}, {}
    m = {n: d[n] + momentum * np.asarray(opt_before[f"momentum/{n}"], np.float64) for n in theta}
    step = {n: d[n] + momentum * m[n] if nesterov else m[n] for n in theta}
    return {n: theta[n] - scale * lr * step[n] for n in theta}, {f"momentum/{n}": m[n] for n in theta}


def max_error(expected: Arrays, got: Arrays) -> float:
    """The largest difference of any tensor, in units of float32 round-off at that tensor's scale
    (|expected − got| / (eps32 · (max |expected| + max |got|)); ≤ a few dozen is round-off).

    >>> e = {"w": np.array([1.0, 2.0])}
    >>> max_error(e, {"w": np.array([1.0, 2.0], np.float32)}) < 1, max_error(e, {"w": np.array([1.0, 2.1])}) > 1e3
    (True, True)
    """
    if set(expected) != set(got):
        return float("inf")
    worst = 0.0
    for n, e in expected.items():
        e64, g64 = np.asarray(e, np.float64), np.asarray(got[n], np.float64)
        if e64.shape != g64.shape or not np.all(np.isfinite(g64)):
            return float("inf")
        scale = F32_EPS * (float(np.max(np.abs(e64), initial=0.0)) + float(np.max(np.abs(g64), initial=0.0)))
        diff = float(np.max(np.abs(e64 - g64), initial=0.0))
        worst = max(worst, 0.0 if diff == 0 else diff / scale if scale > 0 else float("inf"))
    return worst


def grace_s(
    *,
    enabled: bool,
    gamma: float,
    cap_steps: float,
    overlap_steps: int,
    overlap_auto: bool,
    t_step: float,
    t_quorum: float,
    t_sync: float,
) -> float:
    """The grace window after quorum and opening, from the syncer's moving averages (seconds).

    >>> round(grace_s(enabled=True, gamma=0.5, cap_steps=1.0, overlap_steps=2, overlap_auto=False, t_step=0.1,
    ...               t_quorum=0.0, t_sync=0.05), 6)                  # 0.5 · (2 · 0.1 − 0.05)
    0.075
    """
    if not enabled:
        return 0.0
    tau = float(overlap_steps)
    if overlap_auto and t_step > 0:
        tau = max(tau, math.ceil((t_quorum + t_sync) / t_step - 1e-9) + 1)
    return min(max(gamma * (tau * t_step - (t_quorum + t_sync)), 0.0), cap_steps * t_step)


def hold_s(*, t_upload: float, t_step: float) -> float:
    """How long past its merge time a round waits for the body of an upload whose header came in time: three
    average uploads or one step, whichever is longer (docs/trainer.md, "who made a round").

    >>> hold_s(t_upload=0.02, t_step=0.1), hold_s(t_upload=0.5, t_step=0.1)
    (0.1, 1.5)
    """
    return max(3.0 * t_upload, t_step)
