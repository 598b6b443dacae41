"""Safety: global parameters stay finite, no rejected upload is ever merged, none is merged twice.

Every merge participant must be backed by an accepted upload (an ``upload``
event) of that learner incarnation and fragment since the fragment's previous
merge; rejected uploads never produce one. An update is identified by
(learner, incarnation, fragment, base version, round): it may enter one merge
only (a retried upload is acknowledged as a duplicate, never merged again).
On the syncer's clock a learner that missed a round's result uploads again
from the same base for a later round; anchored at that round's start value,
that is a new update. A
syncer restored from a checkpoint forgets the merges after it — they are gone
from the model — so those updates may be merged again; the ones the
checkpoint holds may not.
"""

from __future__ import annotations

import math

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
    merged: dict[tuple[str, str, int, int, int], int] = {}  # update -> merges_total of its merge
    unbacked = twice = 0
    for e in h.events:
        if isinstance(e, ev.SyncerStart):
            pending = {}  # uploads pending in rounds died with the old syncer process
            if e.restored_from_merges >= 0:
                merged = {k: n for k, n in merged.items() if n <= e.restored_from_merges}
        elif isinstance(e, ev.Upload):
            pending.setdefault(e.fragment, set()).add((e.learner_id, e.learner_incarnation))
        elif isinstance(e, ev.Merge):
            have = pending.get(e.fragment, set())
            for p in e.participants:
                key = (p.learner_id, p.incarnation, e.fragment, p.base_version, p.round)
                if p.base_version >= 0 and key in merged:
                    twice += 1
                    problems.append(
                        f"merge {e.fragment}@v{e.version} applied the update of {p.learner_id}/"
                        f"{p.incarnation} from base v{p.base_version} (round {p.round}) a second time"
                    )
                merged[key] = e.merges_total
                if (p.learner_id, p.incarnation) not in have:
                    unbacked += 1
                    problems.append(
                        f"merge {e.fragment}@v{e.version} used {p.learner_id}/{p.incarnation} "
                        "without an accepted upload"
                    )
            pending[e.fragment] = set()
    rejects = ev.refusals_by_reason(h.of(ev.Reject))
    evidence = {
        "rejected_uploads": dict(rejects),
        "unbacked_participants": unbacked,
        "merged_twice": twice,
        "checkpoints": len(h.of(ev.Checkpoint)),
    }
    if problems:
        return Verdict(
            "safety",
            "fail",
            problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
            {**evidence, "problems": problems[:50]},
        )
    return Verdict(
        "safety",
        "pass",
        f"parameters finite throughout; {sum(rejects.values())} rejected upload(s), "
        "none merged; no update merged twice",
        evidence,
    )
