"""Compute goodput: the fraction of learner compute (tokens trained) that ended up in merges.

One of three goodput figures, each with its own name (``docs/design.md``, "Words"): this one needs no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev
from trainer.core.merged_tokens import merged_share


def trained_tokens(events: list[ev.Event]) -> dict[str, int]:
    """Tokens each learner trained, summed over its incarnations (each restarts its counter at zero)."""
    per: dict[str, int] = {}
    current: dict[str, int] = {}
    for e in events:
        if isinstance(e, ev.LearnerStart):
            per[e.learner_id] = per.get(e.learner_id, 0) + current.pop(e.learner_id, 0)
        elif isinstance(e, (ev.Step, ev.LearnerStop)):
            current[e.source] = max(current.get(e.source, 0), e.tokens)
    for lid, t in current.items():
        per[lid] = per.get(lid, 0) + t
    return per


def merged_tokens(events: Iterable[ev.Event], num_fragments: int) -> dict[str, int]:
    """Tokens per learner whose training reached a merge.

    Each contribution stands for its c_tokens ÷ P of them (trainer.core.merged_tokens).
    """
    merged: dict[str, int] = {}
    for m in events:
        if isinstance(m, ev.Merge):
            for p in m.participants:
                merged[p.learner_id] = merged.get(p.learner_id, 0) + merged_share(p.c_tokens, num_fragments)
    return merged


def check_goodput(inp: CheckInput) -> Verdict:
    need = inp.checks.goodput.min
    trained = trained_tokens(inp.history.events)
    merged = merged_tokens(inp.history.events, inp.facts.num_fragments)
    total = sum(trained.values())
    if total == 0:
        return Verdict("goodput", "indeterminate", "no learner trained any tokens")
    frac = sum(merged.values()) / total
    evidence = {"goodput": round(frac, 4), "min": need, "trained_tokens": trained, "merged_tokens": merged}
    status = "pass" if frac >= need else "fail"
    return Verdict("goodput", status, f"compute goodput {frac:.1%}: merged ÷ trained tokens (minimum {need:.0%})",
                   evidence)
