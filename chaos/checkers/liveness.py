"""Liveness: merges keep happening while enough learners are reachable ("zero global downtime").

The longest gap between merges *of each fragment* (every part of the model must
keep training; a fragment's gaps run to the end of training) is measured only
over the time when at least ``min_reachable`` learners could contribute and the
syncer was up; the raw longest gap is reported too. Merged results must reach the learners too: outside faults, at
most half of the ``apply`` events may come later after their merge than half a round and a quarter of a long poll —
an unwoken learner gets its result only when its poll times out (:func:`broadcast`).

A run the progress watchdog ended (:mod:`chaos.watchdog`: no merge and no new
tokens, outside every fault, for longer than its bound) fails, whatever the
gaps: training stopped. Its evidence names the learners that were not taking
part (out by a fault, or no upload of their latest incarnation accepted since
the last merge) with their last merge, last upload, last sign of life and the
calls the syncer refused them since; the last merge; and the watchdog's bound
and how it was derived.
"""

from __future__ import annotations

from typing import Required, TypedDict

from chaos.checkers.base import CheckInput, Verdict, covered, unavailable_intervals
from chaos.checkers.bounds import derive_bound
from chaos.history import History, Stalled
from chaos.records import JsonObject
from trainer import events as ev


def _available_time(
    a: float, b: float, need: int, per: dict[str, list[tuple[float, float]]], syncer: list[tuple[float, float]]
) -> float:
    """Length of (a, b) during which at least ``need`` learners were available and the syncer was up."""
    cuts = sorted(
        {
            a,
            b,
            *(x for iv in per.values() for pair in iv for x in pair if a < x < b),
            *(x for pair in syncer for x in pair if a < x < b),
        }
    )
    total = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        mid = (lo + hi) / 2
        up = sum(1 for iv in per.values() if not covered(mid, iv))
        if up >= need and not covered(mid, syncer):
            total += hi - lo
    return total


def _rel(t: float | None, origin: float) -> float | None:
    return None if t is None else round(t - origin, 3)


def participation(
    history: History, learners: tuple[str, ...], since: float, origin: float, at: float
) -> dict[str, JsonObject]:
    """Per learner, seconds after ``origin``: its last merge, last accepted upload and last sign of life (an event
    of its own or the syncer's about it); its latest incarnation; whether a fault had it out at ``at`` (the end:
    not back by then); whether that incarnation had an upload accepted since ``since`` (taking part: it is waiting
    on the others); the calls the syncer refused it since then, by reason."""
    out: dict[str, JsonObject] = {}
    merges = history.of(ev.Merge)
    per, _ = unavailable_intervals(history, learners)
    for lid in learners:
        merged = [m.ts for m in merges if any(p.learner_id == lid for p in m.participants)]
        uploads = [u for u in history.of(ev.Upload) if u.learner_id == lid]
        seen = [e.ts for e in history.events if e.source == lid or getattr(e, "learner_id", None) == lid]
        starts = [
            (e.ts, e.learner_incarnation) for e in history.of(ev.LearnerStart, ev.Join) if e.learner_id == lid
        ]
        latest = max(starts)[1] if starts else None
        refused = ev.refusals_by_reason(r for r in history.of(ev.Reject) if r.learner_id == lid and r.ts >= since)
        out[lid] = {
            "last_merged_s": _rel(max(merged, default=None), origin),
            "last_upload_s": _rel(max((u.ts for u in uploads), default=None), origin),
            "last_seen_s": _rel(max(seen, default=None), origin),
            "incarnation": latest,
            "out_by_a_fault": any(a <= at <= b for a, b in per[lid]),
            "uploaded_since_last_merge": any(
                u.ts >= since and latest in (None, u.learner_incarnation) for u in uploads
            ),
            "refused_since_last_merge": dict(sorted(refused.items())),
        }
    return out


def _taking_part(p: JsonObject) -> bool:
    return bool(p["uploaded_since_last_merge"]) and not p["out_by_a_fault"]


def _at(x: object) -> str:
    return "never" if x is None else f"{x:+.1f}s"


def _learner_line(lid: str, p: JsonObject) -> str:
    refused = p["refused_since_last_merge"]
    assert isinstance(refused, dict)
    calls = f"; {sum(refused.values())} call(s) refused since ({', '.join(refused)})" if refused else ""
    return (
        f"{lid} (last merged {_at(p['last_merged_s'])}, last upload {_at(p['last_upload_s'])}, "
        f"last seen {_at(p['last_seen_s'])}{calls})"
    )


def stalled_verdict(inp: CheckInput, stall: Stalled, evidence: JsonObject) -> Verdict:
    """FAIL for a run the progress watchdog ended, naming who was not taking part and the last merge."""
    steady = inp.steady
    origin = steady if steady is not None else stall.since
    where = "steady state" if steady is not None else "bring-up"
    merges = inp.history.of(ev.Merge)
    last = merges[-1] if merges else None
    since = last.ts if last is not None else origin
    who = participation(inp.history, inp.facts.learners, since, origin, at=stall.since + stall.quiet_s)
    out = [lid for lid, p in who.items() if not _taking_part(p)]
    evidence = {
        **evidence,
        "stalled": {**stall.model_dump(mode="json"), "since_s": _rel(stall.since, origin)},
        "times_after": where,
        "not_taking_part": out,
        "learners": who,
        "last_merge": None
        if last is None
        else {"s": _rel(last.ts, origin), "merges_total": last.merges_total, "fragment": last.fragment},
    }
    if stall.first_merge:
        head = (
            f"training stopped: no merge and no new tokens for {stall.quiet_s:.1f}s outside any fault "
            f"(from {stall.since - origin:+.1f}s), past the watchdog's bound {stall.bound_s:.1f}s = {stall.how}; "
            "the run was ended and judged"
        )
    else:
        head = (
            f"training never reached a first merge: none {stall.quiet_s:.1f}s after bring-up, past the "
            f"watchdog's bound {stall.bound_s:.1f}s ({stall.how}); the run was ended and judged"
        )
    part = (
        "Not taking part (out by a fault, or no upload of its latest incarnation accepted since the last merge): "
        + "; ".join(_learner_line(lid, who[lid]) for lid in out)
        if out
        else "Every learner's latest incarnation had an upload accepted since the last merge, yet none merged"
    )
    merged = (
        "No merge at all"
        if last is None
        else f"Last merge {last.ts - origin:+.1f}s (merges_total {last.merges_total})"
    )
    return Verdict("liveness", "fail", f"{head}. {part}. {merged}; times after {where}", evidence)


LATE_APPLY_ROUNDS = 0.5  # an apply this many rounds after its merge is late (on time: about τ steps, ~¼ round) ...
LATE_APPLY_POLLS = 0.25  # ... and this much of a long poll: an unwoken learner waits for its poll to time out
LATE_APPLY_SHARE = 0.5  # more late applies than this, outside faults: results are not reaching the learners
MIN_APPLIES = 20


class Broadcast(TypedDict, total=False):
    """:func:`broadcast`'s evidence: judged, and why not or what was counted."""

    judged: Required[bool]
    why: str
    applies: int
    late: int
    late_after_s: float
    median_lag_s: float


def broadcast(inp: CheckInput) -> Broadcast:
    """How promptly merged fragments reach the learners waiting for them, outside faults: the share of ``apply``
    events later than half a round and a quarter of a long poll after the merge that made their version (a
    broadcast that leaves long polls to time out instead of waking them applies up to a whole poll late; a slow
    learner applies at its own, later step boundaries, which the poll's quarter leaves room for). Applies whose span — from a round
    before the merge to the apply — touches any fault window are not judged."""
    round_s = inp.pace.round_s
    if round_s is None:
        return {"judged": False, "why": "no measured round time"}
    made = {(m.fragment, m.version): m.ts for m in inp.history.of(ev.Merge)}
    faults = [
        (w.start, w.end if w.end is not None else inp.history.end)
        for w in inp.history.fault_windows()
        if w.injected
    ]
    lags = [
        a.ts - made[(a.fragment, a.version)]
        for a in inp.history.of(ev.Apply)
        if (a.fragment, a.version) in made
        and not any(lo < a.ts and made[(a.fragment, a.version)] - round_s < hi for lo, hi in faults)
    ]
    after = max(LATE_APPLY_ROUNDS * round_s, LATE_APPLY_POLLS * inp.facts.long_poll_s)
    late = sum(lag > after for lag in lags)
    out: Broadcast = {
        "applies": len(lags),
        "late": late,
        "late_after_s": round(after, 3),
        "judged": len(lags) >= MIN_APPLIES,
    }
    if lags:
        out["median_lag_s"] = round(sorted(lags)[len(lags) // 2], 4)
    return out


def check_liveness(inp: CheckInput) -> Verdict:
    cfg = inp.checks.liveness
    need = cfg.min_reachable
    steady = inp.steady
    stall = inp.stalled
    if steady is None:
        if stall is not None:
            return stalled_verdict(inp, stall, {})
        return Verdict("liveness", "indeterminate", "training never reached a first merge; nothing to measure")
    # Up to the end of training, settle phase included: a stall that outlasts the result is still a stall.
    finish = inp.training_end
    all_merges = [m for m in inp.history.of(ev.Merge) if steady <= m.ts <= finish]
    merges = sorted(m.ts for m in all_merges)
    per, syncer = unavailable_intervals(inp.history, inp.facts.learners)
    # Per fragment: training continues only if every part of the model keeps being merged (one fragment stuck while
    # the others merge — e.g. its learners holding a version a restored syncer reissued — is a stall of that part).
    # Each fragment's gaps run to the end of training: a fragment that stops merging for good is a gap too.
    worst_eff, worst_raw, at, frag = 0.0, 0.0, steady, -1
    for p in sorted({m.fragment for m in all_merges}) or [-1]:
        points = [steady, *sorted(m.ts for m in all_merges if m.fragment == p), finish]
        for a, b in zip(points, points[1:]):
            eff = _available_time(a, b, need, per, syncer)
            if eff > worst_eff:
                worst_eff, at, frag = eff, a, p
            worst_raw = max(worst_raw, b - a)
    pace = inp.pace
    bound = derive_bound(cfg.max_gap_s, pace, startups=0, rounds=cfg.rounds)
    limit = bound.seconds
    evidence: JsonObject = {
        "merges": len(merges),
        "longest_gap_s": round(worst_raw, 3),
        "longest_gap_while_reachable_s": round(worst_eff, 3),
        "gap_starts_s": round(at - steady, 3),
        "gap_fragment": frag,
        "min_reachable": need,
        "max_gap_s": None if limit is None else round(limit, 3),
        "bound": bound.to_json(),
        "pace": pace.to_json(),
    }
    if stall is not None:
        return stalled_verdict(inp, stall, evidence)
    cast = broadcast(inp)
    evidence["broadcast"] = cast
    if cast["judged"] and cast["late"] > LATE_APPLY_SHARE * cast["applies"]:
        return Verdict(
            "liveness",
            "fail",
            f"merged fragments reached the learners late: {cast['late']} of "
            f"{cast['applies']} applies outside faults came more than "
            f"{cast['late_after_s']:.2f}s after their merge (half a round, a quarter "
            "of a long poll) "
            f"(median {cast.get('median_lag_s')}s): are waiting learners woken?",
            evidence,
        )
    if limit is None:
        return Verdict(
            "liveness",
            "indeterminate",
            f"longest gap {worst_eff:.1f}s while reachable, but no bound: {bound.how}",
            evidence,
        )
    if worst_eff > limit:
        return Verdict(
            "liveness",
            "fail",
            f"no merge of fragment {frag} for {worst_eff:.1f}s while at least {need} learner(s) could "
            "contribute "
            f"(starting {at - steady:.1f}s after steady state; limit {limit:.1f}s = {bound.how})",
            evidence,
        )
    return Verdict(
        "liveness",
        "pass",
        f"{len(merges)} merges; longest gap of a fragment {worst_raw:.1f}s, {worst_eff:.1f}s of it while "
        f"≥{need} learner(s) were reachable (limit {limit:.1f}s = {bound.how})",
        evidence,
    )
