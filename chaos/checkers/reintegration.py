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
"""

from __future__ import annotations

from chaos.checkers.base import CheckInput, Verdict, removes_learner, uncovered_seconds
from chaos.history import FaultWindow
from chaos.checkers.bounds import derive_bound
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
            row = {"fault_id": w.fault_id, "kind": w.kind, "learner": lid}
            if w.end is None or not w.healed or w.params.get("restart") is False:
                row.update(status="fail", why="never healed: the learner was not brought back")
                rows.append(row)
                continue
            back = next((m.ts for m in merges if m.ts >= w.end and any(p.learner_id == lid for p in m.participants)),
                        None)
            others = _other_faults_on(lid, w, windows, finish)
            if within is None:
                row.update(status="indeterminate", why=f"no bound: {bound.how}",
                           **({"seconds": round(back - w.end, 3)} if back is not None else {}))
            elif back is not None:
                took, free = back - w.end, uncovered_seconds(w.end, back, others)
                row.update(seconds=round(took, 3), free_s=round(free, 3), status="pass" if free <= within else "fail",
                           why="" if free <= within else f"merged again only after {took:.1f}s"
                                                        + (f" ({free:.1f}s of it free of other faults)"
                                                           if free < took else ""))
            elif (free := uncovered_seconds(w.end, finish, others)) < within:
                row.update(status="indeterminate", why=f"the run ended {finish - w.end:.1f}s after the heal "
                                                       f"({free:.1f}s of it free of other faults), before the "
                                                       f"{within:.1f}s bound (let it settle: set "
                                                       f"cluster.syncer.settle_s to at least {within:.0f})")
            else:
                row.update(status="fail", why=f"no merge included it in the {finish - w.end:.1f}s after the heal")
            rows.append(row)
    evidence.update(within_s=None if within is None else round(within, 3), learners=rows)
    limit = f"limit {within:.1f}s = {bound.how}" if within is not None else f"no bound: {bound.how}"
    if not rows:
        return Verdict("reintegration", "pass", "no fault took a learner out; nothing to reintegrate", evidence)
    failed = [r for r in rows if r["status"] == "fail"]
    if failed:
        r = failed[0]
        return Verdict("reintegration", "fail", f"{len(failed)} of {len(rows)} reintegrations failed; first: "
                                                f"{r['learner']} after {r['fault_id']} ({r['kind']}): {r['why']} "
                                                f"({limit})", evidence)
    if any(r["status"] == "indeterminate" for r in rows):
        why = next(r["why"] for r in rows if r["status"] == "indeterminate")
        return Verdict("reintegration", "indeterminate", f"undecided: {why}", evidence)
    worst = max(r["seconds"] for r in rows)
    return Verdict("reintegration", "pass", f"{len(rows)} reintegrations, slowest {worst:.1f}s ({limit})", evidence)


def _other_faults_on(lid: str, w: FaultWindow, windows: list[FaultWindow], until: float) -> list[tuple[float, float]]:
    """When faults other than ``w`` acted on ``lid`` (naming it, or taking the syncer down): the clock stops."""
    return [(o.start, until if o.end is None else o.end) for o in windows
            if o.fault_id != w.fault_id and o.injected and (lid in o.targets or stops_training(o.kind, o.targets))]
