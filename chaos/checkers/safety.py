"""Safety: global parameters stay finite, and no rejected upload is ever merged.

Every merge participant must be backed by an accepted upload (an ``upload``
event) of that learner incarnation and fragment since the fragment's previous
merge; rejected uploads never produce one.
"""

from __future__ import annotations

import math
from collections import Counter

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def check_safety(inp: CheckInput) -> Verdict:
    h = inp.history
    problems: list[str] = []
    for c in h.of(ev.Checkpoint):
        if not c.params_finite:
            problems.append(f"checkpoint at {c.merges_total} merges holds non-finite parameters")
    for e in h.of(ev.Eval):
        if not math.isfinite(e.loss):
            problems.append(f"eval loss is {e.loss} at {e.merges_total} merges")
    for m in h.of(ev.Merge):
        if not math.isfinite(m.outer_grad_norm):
            problems.append(f"merge {m.fragment}@v{m.version} applied a non-finite outer gradient")
    pending: dict[int, set[tuple[str, str]]] = {}
    unbacked = 0
    for e in h.events:
        if isinstance(e, ev.Upload):
            pending.setdefault(e.fragment, set()).add((e.learner_id, e.learner_incarnation))
        elif isinstance(e, ev.Merge):
            have = pending.get(e.fragment, set())
            for p in e.participants:
                if (p.learner_id, p.incarnation) not in have:
                    unbacked += 1
                    problems.append(f"merge {e.fragment}@v{e.version} used {p.learner_id}/{p.incarnation} "
                                    "without an accepted upload")
            pending[e.fragment] = set()
    rejects = Counter(r.reason for r in h.of(ev.Reject))
    evidence = {"rejected_uploads": dict(rejects), "unbacked_participants": unbacked,
                "checkpoints": len(h.of(ev.Checkpoint))}
    if problems:
        return Verdict("safety", "fail", problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                       {**evidence, "problems": problems[:50]})
    return Verdict("safety", "pass", f"parameters finite throughout; {sum(rejects.values())} rejected upload(s), "
                                     "none merged", evidence)
