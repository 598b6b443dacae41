"""Durability: versions never regress; a restarted syncer resumes from its checkpoint, losing ≤ one interval; its
step clock runs on from where it was (the learners' readings of it do not fall back across the restart)."""

from __future__ import annotations

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def check_durability(inp: CheckInput) -> Verdict:
    problems: list[str] = []
    last: dict[int, int] = {}
    for m in inp.history.of(ev.Merge):
        if m.version <= last.get(m.fragment, -1):
            problems.append(
                f"fragment {m.fragment}: version {m.version} after {last[m.fragment]} "
                f"(at {m.ts - inp.history.start:.1f}s)"
            )
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
            restarts.append(
                {
                    "at_s": round(e.ts - inp.history.start, 3),
                    "merges_before": merges_seen,
                    "restored_from_merges": restored,
                    "lost_merges": lost,
                }
            )
            if restored < 0:
                problems.append(
                    f"syncer restarted from scratch after {merges_seen} merges: no checkpoint restored"
                )
            elif lost > interval:
                problems.append(f"syncer restart lost {lost} merges (> one checkpoint interval of {interval})")
    problems += _clock_fell_back(inp)
    evidence = {"restarts": restarts, "checkpoint_every_merges": interval, "final_versions": last}
    if problems:
        return Verdict(
            "durability",
            "fail",
            problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
            {**evidence, "problems": problems},
        )
    what = (
        f"{len(restarts)} syncer restart(s), each resumed from its checkpoint" if restarts else "no syncer restart"
    )
    return Verdict("durability", "pass", f"versions never regressed; {what}", evidence)


def _clock_fell_back(inp: CheckInput) -> list[str]:
    """Each learner's readings of the syncer's step clock (``sync_start`` clock_step) across a syncer restart: none
    after it may fall short of the last before it by more than a learner's extrapolation error, max(2·H, a fifth of
    the clock) — a restored clock that restarted at 0 sends every round back to the start."""
    restarts = sorted(e.ts for e in inp.history.of(ev.SyncerStart) if e.restored_from_merges >= 0)
    problems: list[str] = []
    h = inp.facts.sync_every
    readings = [e for e in inp.history.of(ev.SyncStartEvent) if e.clock_step is not None]
    for at, until in zip(restarts, [*restarts[1:], float("inf")]):
        for lid in sorted({e.source for e in readings}):
            mine = [e for e in readings if e.source == lid]
            before = [e.clock_step for e in mine if e.ts < at]
            after = [e for e in mine if at <= e.ts < until]
            if not before or not after:
                continue
            low = min(after, key=lambda e: e.clock_step)
            assert low.clock_step is not None and before[-1] is not None
            if before[-1] - low.clock_step > max(2 * h, 0.2 * before[-1]):
                problems.append(
                    f"{lid} read the syncer's step clock at {low.clock_step:.0f} after its restart at "
                    f"{at - inp.history.start:.1f}s, {before[-1]:.0f} before: the restored clock fell back "
                    "instead of running on from its checkpoint"
                )
    return problems
