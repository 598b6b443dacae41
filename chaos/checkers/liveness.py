"""Liveness: merges keep happening while enough learners are reachable ("zero global downtime").

The longest gap between merges is measured only over the time when at least
``min_reachable`` learners could contribute and the syncer was up; the raw
longest gap is reported too.
"""

from __future__ import annotations

from chaos.checkers.base import CheckInput, Verdict, covered, unavailable_intervals
from chaos.checkers.bounds import derive_bound
from trainer import events as ev


def _available_time(a: float, b: float, need: int, per: dict[str, list[tuple[float, float]]],
                    syncer: list[tuple[float, float]]) -> float:
    """Length of (a, b) during which at least ``need`` learners were available and the syncer was up."""
    cuts = sorted({a, b, *(x for iv in per.values() for pair in iv for x in pair if a < x < b),
                   *(x for pair in syncer for x in pair if a < x < b)})
    total = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        mid = (lo + hi) / 2
        up = sum(1 for iv in per.values() if not covered(mid, iv))
        if up >= need and not covered(mid, syncer):
            total += hi - lo
    return total


def check_liveness(inp: CheckInput) -> Verdict:
    cfg = inp.checks.liveness
    need = cfg.min_reachable
    steady = inp.steady
    if steady is None:
        return Verdict("liveness", "indeterminate", "training never reached a first merge; nothing to measure")
    # Up to the end of training, settle phase included: a stall that outlasts the result is still a stall.
    finish = inp.training_end
    merges = sorted(m.ts for m in inp.history.of(ev.Merge) if steady <= m.ts <= finish)
    per, syncer = unavailable_intervals(inp.history, inp.facts.learners)
    points = [steady, *merges]
    if not inp.history.of(ev.Finished):
        points.append(finish)  # a run that never finished: the stall up to its end counts too
    worst_eff, worst_raw, at = 0.0, 0.0, steady
    for a, b in zip(points, points[1:]):
        eff = _available_time(a, b, need, per, syncer)
        if eff > worst_eff:
            worst_eff, at = eff, a
        worst_raw = max(worst_raw, b - a)
    pace = inp.pace
    bound = derive_bound(cfg.max_gap_s, pace, startups=0, rounds=cfg.rounds)
    limit = bound.seconds
    evidence = {"merges": len(merges), "longest_gap_s": round(worst_raw, 3),
                "longest_gap_while_reachable_s": round(worst_eff, 3), "gap_starts_s": round(at - steady, 3),
                "min_reachable": need, "max_gap_s": None if limit is None else round(limit, 3),
                "bound": bound.to_json(), "pace": pace.to_json()}
    if limit is None:
        return Verdict("liveness", "indeterminate", f"longest gap {worst_eff:.1f}s while reachable, but no bound: "
                                                    f"{bound.how}", evidence)
    if worst_eff > limit:
        return Verdict("liveness", "fail",
                       f"no merge for {worst_eff:.1f}s while at least {need} learner(s) could contribute "
                       f"(starting {at - steady:.1f}s after steady state; limit {limit:.1f}s = {bound.how})", evidence)
    return Verdict("liveness", "pass",
                   f"{len(merges)} merges; longest gap {worst_raw:.1f}s, {worst_eff:.1f}s of it while "
                   f"≥{need} learner(s) were reachable (limit {limit:.1f}s = {bound.how})", evidence)
