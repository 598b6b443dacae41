"""Compute goodput: the fraction of learner compute (tokens trained) that ended up in merges.

One of three goodput figures, each with its own name (``docs/design.md``, "Words"): this one needs no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev
from trainer.core.merged_tokens import MergedTokens


def trained_tokens(events: list[ev.Event]) -> dict[str, int]:
    """Tokens each learner trained, summed over its incarnations (each restarts its counter at zero): the most any
    of its events shows — ``step`` summaries, its stop, and the step a sync started at (a learner killed between two
    summaries trained at least up to its last sync, which a merge may hold)."""
    per: dict[str, int] = {}
    current: dict[str, int] = {}
    for e in events:
        if isinstance(e, ev.LearnerStart):
            per[e.learner_id] = per.get(e.learner_id, 0) + current.pop(e.learner_id, 0)
        elif isinstance(e, (ev.Step, ev.LearnerStop)):
            current[e.source] = max(current.get(e.source, 0), e.tokens)
        elif isinstance(e, ev.SyncStartEvent) and e.c_steps > 0:
            current[e.source] = max(current.get(e.source, 0), e.step * (e.c_tokens // e.c_steps))
    for lid, t in current.items():
        per[lid] = per.get(lid, 0) + t
    return per


def merged_tokens(events: Iterable[ev.Event], num_fragments: int) -> dict[str, int]:
    """Trained tokens per learner that merges took, each once (trainer.core.merged_tokens): ≤ what it trained."""
    book = MergedTokens(num_fragments)
    for m in events:
        if isinstance(m, ev.Merge):
            for p in m.participants:
                book.add(p.learner_id, p.incarnation, m.fragment, p.base_version, p.c_tokens)
    return book.per_learner


def check_goodput(inp: CheckInput) -> Verdict:
    need = inp.checks.goodput.min
    trained = trained_tokens(inp.history.events)
    merged = merged_tokens(inp.history.events, inp.facts.num_fragments)
    total = sum(trained.values())
    if total == 0:
        return Verdict("goodput", "indeterminate", "no learner trained any tokens")
    frac = sum(merged.values()) / total
    evidence = {"goodput": round(frac, 4), "min": need, "trained_tokens": trained, "merged_tokens": merged}
    over = sorted(lid for lid, t in merged.items() if t > trained.get(lid, 0))
    if over:  # each trained token is merged at most once: more merged than trained is tokens counted twice
        return Verdict("goodput", "fail", f"merges took more tokens of {', '.join(over)} than they trained "
                                          f"({frac:.1%} overall): a contribution's counters spanned tokens already "
                                          "merged, or counted tokens nobody trained", evidence)
    status = "pass" if frac >= need else "fail"
    return Verdict("goodput", status, f"compute goodput {frac:.1%}: merged ÷ trained tokens (minimum {need:.0%})",
                   evidence)
