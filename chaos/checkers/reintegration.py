"""Reintegration: every learner a fault took out contributes a merged update within a bound after its heal.

"Contributes" means: appears as a participant of a merge after the heal. For a
syncer crash every learner must be merged again after the restart. A fault
that was never healed (e.g. a kill with ``restart: false``) fails: that
learner never came back.

The bound is measured on the learner's *free* time: seconds after the heal
while no other fault acted on it (one naming it, or one taking the syncer
down). A learner killed, then throttled to 50 kB/s while it fetches its state,
then cut off by a syncer crash (nightly, 2026-12-03) owes its slowness to the
later faults, not to the kill; each of those is judged on its own.

**Eventually** (liveness is not participation): coming back once is not enough. From ``eventually_rounds`` rounds
after the last learner is back from the last fault to the end of training, every learner alive and reachable must
take part in merges at its fault-free rate — the lower of its share of the merges before the first fault once every
learner had taken part (:func:`reference_merges`; unless too few) and the median share of the others in the phase — less three binomial standard errors of the two shares and a
5-point slack. Learners that stay out are named. A phase with fewer than ``MIN_PHASE_ROUNDS`` rounds of every
fragment is not judged (its evidence says so).
"""

from __future__ import annotations

import math
import statistics

from chaos.checkers.base import (
    CheckInput,
    Verdict,
    covered,
    removes_learner,
    unavailable_intervals,
    uncovered_seconds,
)
from chaos.checkers.bounds import derive_bound
from chaos.history import FaultWindow
from faults.kinds import stops_training
from trainer import events as ev


def check_reintegration(inp: CheckInput) -> Verdict:
    cfg = inp.checks.reintegration
    pace = inp.pace
    bound = derive_bound(cfg.within_s, pace, startups=cfg.startups, rounds=cfg.rounds)
    evidence: dict = {"bound": bound.to_json(), "pace": pace.to_json()}
    within = bound.seconds
    merges = inp.history.of(ev.Merge)
    finish = inp.training_end  # a settle phase after the budget gives healed learners their chance to be merged
    rows: list[dict] = []
    windows = inp.history.fault_windows()
    for w in windows:
        if stops_training(w.kind, w.targets):
            who = list(inp.facts.learners)
        elif removes_learner(w):
            who = [t for t in w.targets if t in inp.facts.learners]
        else:
            continue
        for lid in who:
            row: dict[str, object] = {"fault_id": w.fault_id, "kind": w.kind, "learner": lid}
            if w.end is None or not w.healed or w.params.get("restart") is False:
                row.update(status="fail", why="never healed: the learner was not brought back")
                rows.append(row)
                continue
            back = next(
                (m.ts for m in merges if m.ts >= w.end and any(p.learner_id == lid for p in m.participants)), None
            )
            others = _other_faults_on(lid, w, windows, finish)
            if within is None:
                row.update(
                    status="indeterminate",
                    why=f"no bound: {bound.how}",
                    **({"seconds": round(back - w.end, 3)} if back is not None else {}),
                )
            elif back is not None:
                took, free = back - w.end, uncovered_seconds(w.end, back, others)
                row.update(
                    seconds=round(took, 3),
                    free_s=round(free, 3),
                    status="pass" if free <= within else "fail",
                    why=""
                    if free <= within
                    else f"merged again only after {took:.1f}s"
                    + (f" ({free:.1f}s of it free of other faults)" if free < took else ""),
                )
            elif (free := uncovered_seconds(w.end, finish, others)) < within:
                row.update(
                    status="indeterminate",
                    why=f"the run ended {finish - w.end:.1f}s after the heal "
                    f"({free:.1f}s of it free of other faults), before the "
                    f"{within:.1f}s bound (let it settle: set "
                    f"cluster.syncer.settle_s to at least {within:.0f})",
                )
            else:
                row.update(status="fail", why=f"no merge included it in the {finish - w.end:.1f}s after the heal")
            rows.append(row)
    evidence.update(within_s=None if within is None else round(within, 3), learners=rows)
    limit = f"limit {within:.1f}s = {bound.how}" if within is not None else f"no bound: {bound.how}"
    phase = eventually(inp)
    evidence["eventually"] = phase
    out = [r for r in phase.get("learners", []) if r["status"] == "fail"]
    if out:
        names = ", ".join(
            f"{r['learner']} in {r['rate']:.0%} of merges (fault-free {r['reference']:.0%}, needs "
            f"{r['needs']:.0%})"
            for r in out
        )
        return Verdict(
            "reintegration",
            "fail",
            f"after the last fault, {len(out)} learner(s) alive and reachable took "
            f"part less than at their fault-free rate: {names} (phase from "
            f"{phase['from_s']:.1f}s, {phase['merges']} merges)",
            evidence,
        )
    if not rows:
        return Verdict("reintegration", "pass", "no fault took a learner out; nothing to reintegrate", evidence)
    failed = [r for r in rows if r["status"] == "fail"]
    if failed:
        r = failed[0]
        return Verdict(
            "reintegration",
            "fail",
            f"{len(failed)} of {len(rows)} reintegrations failed; first: "
            f"{r['learner']} after {r['fault_id']} ({r['kind']}): {r['why']} "
            f"({limit})",
            evidence,
        )
    if any(r["status"] == "indeterminate" for r in rows):
        why = next(r["why"] for r in rows if r["status"] == "indeterminate")
        return Verdict("reintegration", "indeterminate", f"undecided: {why}", evidence)
    worst = max(r["seconds"] for r in rows)
    return Verdict(
        "reintegration", "pass", f"{len(rows)} reintegrations, slowest {worst:.1f}s ({limit})", evidence
    )


MIN_PHASE_ROUNDS = 4  # rounds of every fragment the eventually phase needs to be judged
MIN_REFERENCE_MERGES = 8  # merges before the first fault that make a learner's own fault-free rate
SLACK = 0.05  # participation a learner may lack beyond the binomial error (rounds are not independent draws)


def needed_share(ref: float, n_ref: int, n: int, per_round: int = 1) -> float:
    """The share of ``n`` merges a learner must take part in, against its share ``ref`` of ``n_ref`` fault-free
    merges: three standard errors of the difference and :data:`SLACK` below. The spread is the reference's smoothed
    by two in and two out (Agresti-Coull): a learner in all 29 merges before the first fault is not one that never
    misses (a real latency-jitter run's learner-1 then took part in 94% of 189). The ``per_round`` merges of one
    round of every fragment count as one draw: a learner early or late for a round is so for all its fragments
    (shares of 35% against 61% and 51% among three equal learners in a healthy container run).

    >>> round(needed_share(1.0, 29, 189), 3), round(needed_share(0.5, 29, 189), 3)
    (0.807, 0.151)
    >>> round(needed_share(0.5587, 179, 179, per_round=4), 3)
    0.194
    """
    smooth = (ref * n_ref + 2) / (n_ref + 4)
    err = 3 * math.sqrt(smooth * (1 - smooth) * per_round * (1 / n + 1 / n_ref))
    return max(ref - err - SLACK, 0.0)


def reference_merges(merges: list[ev.Merge], learners: tuple[str, ...] | list[str]) -> list[ev.Merge]:
    """The merges before the first fault that show each learner's fault-free rate: those from the first in which
    every learner has taken part at least once (none if one never did). Before that the cluster is still starting:
    the learner up first takes part in nearly every merge (82% in the 3 s before a container run's first fault,
    against 45% once all three were training, a false alarm in CI), the ones still starting in few.

    >>> m = lambda t, *who: ev.Merge.model_construct(ts=t, participants=[
    ...     ev.ParticipantInfo.model_construct(learner_id=w) for w in who])
    >>> [x.ts for x in reference_merges([m(1, "a"), m(2, "a"), m(3, "b"), m(4, "a", "b")], ["a", "b"])]
    [3, 4]
    >>> reference_merges([m(1, "a")], ["a", "b"])
    []
    """
    first_in: dict[str, float] = {}
    for m in merges:
        for p in m.participants:
            first_in.setdefault(p.learner_id, m.ts)
    if not set(learners) <= set(first_in):
        return []
    all_in = max(first_in[lid] for lid in learners)
    return [m for m in merges if m.ts >= all_in]


def eventually(inp: CheckInput) -> dict:
    """The eventually phase's evidence: its window, and per learner alive and reachable through it, its share of
    the merges against its fault-free share (``status`` fail: it stayed out)."""
    h, pace = inp.history, inp.pace
    steady, end = inp.steady, inp.training_end
    if steady is None or pace.round_s is None:
        return {"judged": False, "why": "no steady state or no measured round time"}
    windows = [w for w in h.fault_windows() if w.injected]
    per, syncer = unavailable_intervals(h, inp.facts.learners)
    heals = [w.end for w in windows if w.end is not None]
    backs = [b for ivs in per.values() for _, b in ivs if b < end] + [b for _, b in syncer if b < end]
    start = max([steady, *heals, *backs]) + inp.checks.reintegration.eventually_rounds * pace.round_s
    merges = [m for m in h.of(ev.Merge) if start <= m.ts <= end]
    phase: dict = {"from_s": round(start - h.start, 3), "to_s": round(end - h.start, 3), "merges": len(merges)}
    if len(merges) < MIN_PHASE_ROUNDS * max(inp.facts.num_fragments, 1):
        return {
            **phase,
            "judged": False,
            "why": f"{len(merges)} merges after the last fault settled, fewer than "
            f"{MIN_PHASE_ROUNDS} rounds of every fragment",
        }
    first = min((w.start for w in windows), default=end)
    before = reference_merges([m for m in h.of(ev.Merge) if steady <= m.ts < first], inp.facts.learners)
    alive = [
        lid
        for lid in inp.facts.learners
        if not any(a < end and b > start for a, b in per[lid]) and not covered(start, syncer)
    ]

    def share(lid: str, ms: list[ev.Merge]) -> float:
        return sum(any(p.learner_id == lid for p in m.participants) for m in ms) / len(ms)

    rates = {lid: share(lid, merges) for lid in alive}
    rows = []
    per_round = max(inp.facts.num_fragments, 1)
    for lid in alive:
        # Staying out is falling below both what the learner did before the faults and what its peers do now: a
        # learner slower than the rest is judged by its own rate, one that had most merges to itself while the others
        # were still starting by its peers'.
        others = [r for o, r in rates.items() if o != lid]
        peers = statistics.median(others) if others else 1.0
        if len(before) >= MIN_REFERENCE_MERGES and share(lid, before) < peers:
            ref, n_ref, source = share(lid, before), len(before), "before the first fault"
        else:
            ref, n_ref, source = peers, len(merges), "the others' median"
        needs = needed_share(ref, n_ref, len(merges), per_round)
        rows.append(
            {
                "learner": lid,
                "rate": round(rates[lid], 4),
                "reference": round(ref, 4),
                "source": source,
                "needs": round(needs, 4),
                "status": "pass" if rates[lid] >= needs else "fail",
            }
        )
    return {**phase, "judged": True, "learners": rows}


def _other_faults_on(
    lid: str, w: FaultWindow, windows: list[FaultWindow], until: float
) -> list[tuple[float, float]]:
    """When faults other than ``w`` acted on ``lid`` (naming it, or taking the syncer down): the clock stops."""
    return [
        (o.start, until if o.end is None else o.end)
        for o in windows
        if o.fault_id != w.fault_id and o.injected and (lid in o.targets or stops_training(o.kind, o.targets))
    ]
