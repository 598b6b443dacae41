"""Is the run inside Decoupled DiLoCo's regime? A warning, not a verdict, when the fault-free part says no.

The syncer merges what arrives within a round's grace window (about a step). When the learners' step
boundaries jitter by more than that — bare CPU steps on a loaded machine, say — most rounds merge one learner,
stale bases are rebased, and with outer momentum the model oscillates: the run then measures the harness, not
the algorithm (seen in CI: 1.2 of 3 learners per merge before any fault, parity +0.06). The fault-free part of
the run (before the first fault, or all of it) tells: participants per merge below half the learners.

Example:
    >>> regime_warnings([(t, 1) for t in range(20)], first_fault=None, learners=3, mode="decoupled")[0][:52]
    'outside the regime: 1.0 of 3 learners per merge befo'
    >>> regime_warnings([(t, 3 if t < 10 else 1) for t in range(20)], first_fault=10.0, learners=3, mode="decoupled")
    []
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_MERGES = 10  # fewer fault-free merges than this say nothing either way
MIN_SHARE = 0.5  # of the learners, per merge


def regime_warnings(merges: Sequence[tuple[float, int]], *, first_fault: float | None, learners: int,
                    mode: str) -> list[str]:
    """Warnings (empty: none) from ``merges`` as (time, participants), those before ``first_fault`` (None: all)."""
    if mode != "decoupled" or learners < 2:
        return []  # synchronous modes wait for every learner by construction
    calm = [n for ts, n in merges if first_fault is None or ts < first_fault]
    if len(calm) < MIN_MERGES:
        return []
    per_merge = sum(calm) / len(calm)
    if per_merge >= MIN_SHARE * learners:
        return []
    return [f"outside the regime: {per_merge:.1f} of {learners} learners per merge before any fault "
            f"({len(calm)} merges). Uploads spread over more than the grace window, so the checks measure the "
            f"harness rather than Decoupled DiLoCo; emulate accelerator steps with cluster.learner.step_delay_s "
            f"(README: \"emulated accelerators\") or give the machine fewer learners."]
