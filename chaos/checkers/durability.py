"""Durability: versions never regress; a restarted syncer resumes from its checkpoint, losing ≤ one interval."""

from __future__ import annotations

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def check_durability(inp: CheckInput) -> Verdict:
    problems: list[str] = []
    last: dict[int, int] = {}
    for m in inp.history.of(ev.Merge):
        if m.version <= last.get(m.fragment, -1):
            problems.append(f"fragment {m.fragment}: version {m.version} after {last[m.fragment]} "
                            f"(at {m.ts - inp.history.start:.1f}s)")
        last[m.fragment] = max(m.version, last.get(m.fragment, -1))
    restarts: list[dict] = []
    interval = inp.facts.checkpoint_every_merges
    merges_seen = 0
    for e in inp.history.events:
        if isinstance(e, ev.Merge):
            merges_seen = max(merges_seen, e.merges_total)
        elif isinstance(e, ev.SyncerStart) and merges_seen > 0:
            restored = e.restored_from_merges
            lost = merges_seen - max(restored, 0)
            restarts.append({"at_s": round(e.ts - inp.history.start, 3), "merges_before": merges_seen,
                             "restored_from_merges": restored, "lost_merges": lost})
            if restored < 0:
                problems.append(f"syncer restarted from scratch after {merges_seen} merges: no checkpoint restored")
            elif lost > interval:
                problems.append(f"syncer restart lost {lost} merges (> one checkpoint interval of {interval})")
    evidence = {"restarts": restarts, "checkpoint_every_merges": interval, "final_versions": last}
    if problems:
        return Verdict("durability", "fail", problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1
                                                           else ""), {**evidence, "problems": problems})
    what = f"{len(restarts)} syncer restart(s), each resumed from its checkpoint" if restarts else "no syncer restart"
    return Verdict("durability", "pass", f"versions never regressed; {what}", evidence)
