"""Is the run inside Decoupled DiLoCo's regime? A warning, not a verdict, when the fault-free part says no.

The syncer merges what arrives within a round's grace window (about a step). When the learners' step
boundaries jitter by more than that — bare CPU steps on a loaded machine, say — most rounds merge one learner,
stale bases are rebased, and with outer momentum the model oscillates: the run then measures the harness, not
the algorithm (seen in CI: 1.2 of 3 learners per merge before any fault, parity +0.06). The fault-free part of
the run tells: participants per merge below half the learners.

The fault-free part starts once every learner has taken part in a merge: before that the learners are still
starting (containers, compilation — seconds apart on a loaded machine), and a round that merges one learner
because the others have not started is start-up, not the regime. When the run's own fault-free part is shorter
than MIN_MERGES (a fault soon after start-up), the fault-free baseline of the same configuration decides.

Example (merges as (time, learner ids)):
    >>> alone = [(t, ["a"]) for t in range(20)]
    >>> regime_warnings(alone, first_fault=None, learners=3, mode="decoupled")[0][:68]
    'outside the regime: 1.0 of 3 learners per merge before any fault (20'
    >>> startup = [(t, ["a"]) for t in range(15)] + [(t, ["a", "b", "c"]) for t in range(15, 30)]
    >>> regime_warnings(startup, first_fault=None, learners=3, mode="decoupled")
    []
    >>> regime_warnings(startup, first_fault=18.0, learners=3, mode="decoupled", baseline=alone)[0][:66]
    'outside the regime: 1.0 of 3 learners per merge in the fault-free '
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

MIN_MERGES = 10  # fewer fault-free merges than this say nothing either way
MIN_SHARE = 0.5  # of the learners, per merge

Merges = Sequence[tuple[float, Collection[str]]]  # (time, ids of the learners that took part), in time order


def calm_merges(merges: Merges, *, first_fault: float | None, learners: int) -> list[int]:
    """Participants of each merge after start-up (every learner — or every one the run ever merged, if fewer —
    has taken part) and before ``first_fault`` (None: to the end).

    >>> calm_merges([(0, ["a"]), (1, ["b"]), (2, ["a", "b"]), (3, ["a"])], first_fault=3, learners=2)
    [1, 2]
    """
    everyone = len({i for _, ids in merges for i in ids})
    seen: set[str] = set()
    calm: list[int] = []
    for ts, ids in merges:
        if first_fault is not None and ts >= first_fault:
            break
        seen.update(ids)
        if len(seen) >= min(learners, everyone):
            calm.append(len(ids))
    return calm


def regime_warnings(
    merges: Merges, *, first_fault: float | None, learners: int, mode: str, baseline: Merges | None = None
) -> list[str]:
    """Warnings (empty: none) from the run's fault-free ``merges`` or, when too few, its ``baseline``'s."""
    if mode != "decoupled" or learners < 2:
        return []  # synchronous modes wait for every learner by construction
    calm, where = calm_merges(merges, first_fault=first_fault, learners=learners), "before any fault"
    if len(calm) < MIN_MERGES and baseline is not None:
        calm, where = calm_merges(baseline, first_fault=None, learners=learners), "in the fault-free baseline"
    if len(calm) < MIN_MERGES:
        return []
    per_merge = sum(calm) / len(calm)
    if per_merge >= MIN_SHARE * learners:
        return []
    return [
        f"outside the regime: {per_merge:.1f} of {learners} learners per merge {where} "
        f"({len(calm)} merges after start-up). Uploads spread over more than the grace window, so the checks "
        f"measure the harness rather than Decoupled DiLoCo; emulate accelerator steps with "
        f'cluster.learner.step_delay_s (docs/benchmarks.md: "emulated accelerators") or give the machine fewer learners.'
    ]
