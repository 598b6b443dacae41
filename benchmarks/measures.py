"""What the benchmarks measure, computed from a run's events (pure: no I/O, no clock).

Every function takes the parsed events of one run (``History.events``: trainer
events and controller records, ordered by time) and returns numbers; the
benchmark scripts only run clusters and call these, so the definitions below
are the ones the published tables use, and they are unit-tested on hand-made
event lists.

Definitions:

- **start** ``t0``: the first inner step any learner finished (after its JIT
  compile), so start-up time does not count against any mode.
- **time to target**: from ``t0`` to the first eval whose loss is at or below
  the target.
- **merge round**: one merge of fragment 0; in the synchronous modes every
  fragment merges once per round, so the round period is the wall time of H
  inner steps plus their blocking communication.
- **compute goodput**: the fraction of trained tokens whose training reached
  a merge (the chaos checker's figure; a contribution's ``c_tokens`` counts
  each trained token once per fragment, hence the division by P).
- **merged goodput**: merged learner time over allocated learner time,
  ``merged tokens / (M × wall × nominal tokens per learner-second)``; the
  nominal rate is what one learner trains when it never waits. The paper's
  *goodput* also counts trained work that was neither merged nor thrown away,
  which a run's events cannot tell apart: merged goodput is its lower bound
  (the scale simulator reports both). The words: ``docs/design.md``, "Words".
- **longest stall**: the longest stretch without any merge, from ``t0`` to
  the end of training.

Example:
    >>> from trainer import events as ev
    >>> evs = [ev.Eval(ts=5.0, source="syncer", merges_total=4, versions=[1], loss=3.0, loss_floor=2.0,
    ...                tokens_total=100), ev.Eval(ts=9.0, source="syncer", merges_total=8, versions=[2],
    ...                loss=2.5, loss_floor=2.0, tokens_total=200)]
    >>> first_below(evs, 2.6, t0=1.0)
    (8.0, 200)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chaos.checkers.goodput import merged_tokens, trained_tokens
from trainer import events as ev
from trainer.core.reasons import RejectReason
from trainer.metrics import final_eval


def _of(events: Sequence[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def training_start(events: Sequence[Any]) -> float | None:
    """When the first inner step of any learner ended (needs ``learner.step_event_every = 1``)."""
    firsts = [e.ts for e in _of(events, ev.Step) if e.step == 1]
    return min(firsts) if firsts else None


def training_end(events: Sequence[Any]) -> float | None:
    """The last merge: training that never reached the model does not count as running time."""
    merges = _of(events, ev.Merge)
    return merges[-1].ts if merges else None


def first_eval_below(events: Sequence[Any], target: float) -> ev.Eval | None:
    """The first eval with loss ≤ ``target``; None if never."""
    return next((e for e in _of(events, ev.Eval) if e.loss <= target), None)


def first_below(events: Sequence[Any], target: float, t0: float) -> tuple[float, int] | None:
    """(seconds since ``t0``, tokens trained) at the first eval with loss ≤ ``target``; None if never."""
    e = first_eval_below(events, target)
    return (e.ts - t0, e.tokens_total) if e else None


def eval_curve(events: Sequence[Any], t0: float) -> list[tuple[float, int, float]]:
    """(seconds since ``t0``, tokens trained, eval loss) of every eval, in order."""
    return [(e.ts - t0, e.tokens_total, e.loss) for e in _of(events, ev.Eval)]


def loss_at_tokens(events: Sequence[Any], tokens: int) -> float | None:
    """The eval loss of the last eval at or before ``tokens`` trained; None if none was that early.

    Example:
        >>> from trainer import events as ev
        >>> evs = [ev.Eval(ts=1.0, source="syncer", merges_total=1, versions=[1], loss=l, loss_floor=0.0,
        ...                tokens_total=t) for t, l in [(100, 3.0), (200, 2.0)]]
        >>> loss_at_tokens(evs, 150), loss_at_tokens(evs, 50)
        (3.0, None)
    """
    best = None
    for e in _of(events, ev.Eval):
        if e.tokens_total <= tokens:
            best = e.loss
    return best


def round_period(events: Sequence[Any], fragment: int = 0, skip: int = 1) -> float | None:
    """Median seconds between consecutive merges of ``fragment`` (the first ``skip`` gaps are warm-up)."""
    ts = [e.ts for e in _of(events, ev.Merge) if e.fragment == fragment]
    gaps = [b - a for a, b in zip(ts, ts[1:])][skip:]
    return statistics.median(gaps) if gaps else None


def longest_stall(events: Sequence[Any], t0: float, t1: float) -> float:
    """The longest time in ``[t0, t1]`` without a merge.

    Example:
        >>> from trainer import events as ev
        >>> m = lambda t: ev.Merge(ts=t, source="syncer", fragment=0, version=1, base_version=0, participants=[],
        ...                        rule="rda", wait_s=0, quorum_wait_s=0, outer_grad_norm=1, merges_total=1,
        ...                        tokens_total=1)
        >>> longest_stall([m(2.0), m(3.0), m(9.0)], t0=0.0, t1=10.0)
        6.0
    """
    ts = [t0] + [e.ts for e in _of(events, ev.Merge) if t0 <= e.ts <= t1] + [t1]
    return max(b - a for a, b in zip(ts, ts[1:]))


def participation(events: Sequence[Any]) -> dict[str, float]:
    """Mean participants per merge, and per learner the fraction of its finished uploads that were merged.

    Example:
        >>> from trainer import events as ev
        >>> p = ev.ParticipantInfo(learner_id="learner-0", incarnation="a", weight=1, c_steps=8, c_tokens=800)
        >>> m = ev.Merge(ts=2.0, source="syncer", fragment=0, version=1, base_version=0, participants=[p],
        ...              rule="rda", wait_s=0, quorum_wait_s=0, outer_grad_norm=1, merges_total=1, tokens_total=1)
        >>> r = ev.SyncResult(ts=1.0, source="learner-0", fragment=0, base_version=0, accepted=True, reason="",
        ...                   seconds=0.1, bytes=10)
        >>> participation([r, r, m])
        {'per_merge': 1.0, 'learner-0': 0.5}
    """
    merges = _of(events, ev.Merge)
    merged: dict[str, int] = {}
    for mg in merges:
        for p in mg.participants:
            merged[p.learner_id] = merged.get(p.learner_id, 0) + 1
    sent: dict[str, int] = {}
    for r in _of(events, ev.SyncResult):
        sent[r.source] = sent.get(r.source, 0) + 1
    out = {"per_merge": sum(len(mg.participants) for mg in merges) / len(merges) if merges else 0.0}
    out.update({lid: merged.get(lid, 0) / n for lid, n in sorted(sent.items()) if n})
    return out


def grace_waits(events: Sequence[Any]) -> list[float]:
    """How long each merge that someone active was missing from waited after it could first merge (its quorum in,
    its opening passed), in steps of the syncer's pace then: the grace window it used (plus any hold).

    Example:
        >>> from trainer import events as ev
        >>> d = ev.MergeDecision(contributions=2, active_learners=3, t_step=0.1, t_quorum=0, t_upload=0,
        ...                      t_merge=0, t_broadcast=0)
        >>> m = ev.Merge(ts=2.0, source="syncer", fragment=0, version=1, base_version=0, participants=[],
        ...              rule="rda", wait_s=0.2, quorum_wait_s=0.05, outer_grad_norm=1, merges_total=1,
        ...              tokens_total=1, decision=d)
        >>> [round(w, 6) for w in grace_waits([m, m.model_copy(update={"decision": None})])]
        [0.5]
    """
    return [
        max(min(mg.wait_s, mg.quorum_wait_s), 0.0) / mg.decision.t_step
        for mg in _of(events, ev.Merge)
        if mg.decision is not None
        and mg.decision.contributions < mg.decision.active_learners
        and mg.decision.t_step > 0
    ]


def late_refused(events: Sequence[Any]) -> int:
    """Uploads refused because their round had merged (``late_round``)."""
    return sum(e.refusals for e in _of(events, ev.Reject) if e.reason == RejectReason.LATE_ROUND.value)


def format_median_p90(values: Sequence[float], digits: int = 2) -> str:
    """``median; p90`` (nearest rank) as the benchmarks' tables print a pooled distribution; a dash for none.

    >>> format_median_p90([0.0, 1.0, 1.0, 2.0]), format_median_p90([])
    ('1.00; 2.00', '—')
    """
    if not values:
        return "—"
    return f"{percentile(values, 0.5):.{digits}f}; {percentile(values, 0.9):.{digits}f}"


def outer_steps_per_round(events: Sequence[Any], *, num_fragments: int, sync_every: int) -> float | None:
    """Merges per fragment per H inner steps: the paper takes exactly one outer step per scheduled round.

    Rounds are counted from the learners' steps (the mean of each learner's last reported step, H steps per
    round per fragment), so the figure means the same whatever decides the rounds.

    Example:
        >>> from trainer import events as ev
        >>> st = [ev.Step(ts=1.0, source=f"learner-{i}", step=64, loss=1, tokens=1, step_time_s=0.05, blocked_s=0)
        ...       for i in range(2)]
        >>> mg = [ev.Merge(ts=2.0, source="syncer", fragment=p, version=1, base_version=0, participants=[],
        ...                rule="rda", wait_s=0, quorum_wait_s=0, outer_grad_norm=1, merges_total=1, tokens_total=1)
        ...       for p in (0, 1, 0, 1, 0, 1)]
        >>> outer_steps_per_round([*st, *mg], num_fragments=2, sync_every=32)
        1.5
    """
    last: dict[str, int] = {}
    for e in _of(events, ev.Step):
        last[e.source] = max(last.get(e.source, 0), e.step)
    if not last:
        return None
    rounds = num_fragments * (sum(last.values()) / len(last)) / sync_every
    return len(_of(events, ev.Merge)) / rounds if rounds else None


def worst_eval_after_first(events: Sequence[Any]) -> tuple[float, float] | None:
    """(first eval loss, highest eval loss after it): training that climbs above its start is not training.

    Example:
        >>> from trainer import events as ev
        >>> es = [ev.Eval(ts=float(i), source="syncer", merges_total=i, versions=[], loss=x, loss_floor=1.0,
        ...               tokens_total=i, final=False) for i, x in enumerate([4.2, 3.0, 3.5])]
        >>> worst_eval_after_first(es)
        (4.2, 3.5)
    """
    evals = _of(events, ev.Eval)
    if len(evals) < 2:
        return None
    return evals[0].loss, max(e.loss for e in evals[1:])


# Two-sided 95% Student t quantiles by degrees of freedom (the benchmarks run a handful of seeds).
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (0 for a single value).

    Example:
        >>> m, h = mean_ci95([2.0, 2.2, 2.4, 2.6, 2.8])
        >>> round(m, 3), round(h, 3)
        (2.4, 0.393)
    """
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    df = n - 1
    t = _T95.get(df) or next((q for d, q in sorted(_T95.items()) if d >= df), 1.96)
    return mean, t * sd / n**0.5


def weight_share(events: Sequence[Any], learners: Sequence[str]) -> float | None:
    """The share of all merge weight that went to ``learners`` (each merge's weights sum to 1).

    Example:
        >>> from trainer import events as ev
        >>> ps = [ev.ParticipantInfo(learner_id=f"learner-{i}", incarnation="a", weight=w, c_steps=8, c_tokens=800)
        ...       for i, w in enumerate([0.25, 0.75])]
        >>> mg = ev.Merge(ts=2.0, source="syncer", fragment=0, version=1, base_version=0, participants=ps,
        ...               rule="rda", wait_s=0, quorum_wait_s=0, outer_grad_norm=1, merges_total=1, tokens_total=1)
        >>> weight_share([mg, mg], ["learner-0"])
        0.25
    """
    merges = _of(events, ev.Merge)
    if not merges:
        return None
    chosen = set(learners)
    return sum(p.weight for mg in merges for p in mg.participants if p.learner_id in chosen) / len(merges)


def format_ci(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± half-width`` of the 95% t interval, as the quality benchmarks print it.

    Example:
        >>> format_ci([2.0, 2.2, 2.4, 2.6, 2.8], 2)
        '2.40 ± 0.39'
    """
    mean, half = mean_ci95(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def final_eval_loss(events: Sequence[Any]) -> float | None:
    """The final eval's loss (the last eval when the run was stopped before its final one)."""
    e = final_eval(events)
    return e.loss if e else None


@dataclass(frozen=True)
class Goodput:
    """Goodput figures of one run (see the module docstring for the definitions)."""

    compute: float  # merged tokens / trained tokens
    merged: float  # merged tokens / (wall × nominal rate of all learners)
    merged_tokens: int
    trained_tokens: int
    wall_s: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "compute": round(self.compute, 4),
            "merged": round(self.merged, 4),
            "merged_tokens": self.merged_tokens,
            "trained_tokens": self.trained_tokens,
            "wall_s": round(self.wall_s, 2),
        }


def goodput(
    events: Sequence[Any], *, num_fragments: int, nominal_tokens_per_s: float, t0: float, t1: float
) -> Goodput:
    """Compute and merged goodput of a run whose training ran from ``t0`` to ``t1``.

    Example:
        >>> from trainer import events as ev
        >>> p = ev.ParticipantInfo(learner_id="learner-0", incarnation="a", weight=1, c_steps=8, c_tokens=800)
        >>> m = ev.Merge(ts=2.0, source="syncer", fragment=0, version=1, base_version=0, participants=[p],
        ...              rule="rda", wait_s=0, quorum_wait_s=0, outer_grad_norm=1, merges_total=1, tokens_total=1)
        >>> s = ev.Step(ts=2.0, source="learner-0", step=8, loss=1, tokens=800, step_time_s=0.1, blocked_s=0)
        >>> g = goodput([s, m], num_fragments=1, nominal_tokens_per_s=200.0, t0=0.0, t1=8.0)
        >>> g.compute, g.merged
        (1.0, 0.5)
    """
    merged = sum(merged_tokens(events, num_fragments).values())
    trained = sum(trained_tokens(list(events)).values())
    wall = max(t1 - t0, 1e-9)
    return Goodput(
        compute=merged / trained if trained else 0.0,
        merged=merged / (wall * nominal_tokens_per_s),
        merged_tokens=merged,
        trained_tokens=trained,
        wall_s=wall,
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``; None for none.

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([], 0.9)
        (2.0, None)
    """
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s))) - 1))]


def paired_relative(runs: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]]) -> list[float]:
    """Per seed both have, the final loss's difference from ``base``'s in % of it (paired by seed).

    >>> paired_relative({1: {"final_loss": 2.2}, 2: {"final_loss": 3.0}}, {1: {"final_loss": 2.0}})
    [10.000000000000009]
    """
    return [
        100 * (r["final_loss"] - base[s]["final_loss"]) / base[s]["final_loss"]
        for s, r in runs.items()
        if s in base
    ]
