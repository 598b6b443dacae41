"""Run summaries computed from the event logs (the one source of truth).

Example:
    metrics = summarize_run("runs/demo")
    print(metrics["final_eval_loss"], metrics["loss_floor"])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainer import events as ev


def final_eval(events: Iterable[Any]) -> ev.Eval | None:
    """The run's final eval, or its last one when it never made a final one (stopped early, crashed)."""
    evals = [e for e in events if isinstance(e, ev.Eval)]
    finals = [e for e in evals if e.final]
    return (finals or evals)[-1] if evals else None


def summarize_run(run_dir: str | Path) -> dict[str, Any]:
    """Final eval loss, loss floor, merges, tokens, goodput and rejections of a run."""
    events = list(ev.iter_run_events(run_dir))
    evals = [e for e in events if isinstance(e, ev.Eval)]
    merges = [e for e in events if isinstance(e, ev.Merge)]
    syncs = [e for e in events if isinstance(e, ev.SyncStartEvent)]
    merged_tokens = sum(p.c_tokens for m in merges for p in m.participants)
    started_tokens = sum(s.c_tokens for s in syncs)
    steps = [e for e in events if isinstance(e, ev.LearnerStop)]
    last = final_eval(evals)
    t0 = min((e.ts for e in events), default=0.0)
    t1 = max((e.ts for e in events), default=0.0)
    return {
        "final_eval_loss": last.loss if last else math.nan,
        "final_eval_is_final": bool(last and last.final),
        "loss_floor": last.loss_floor if last else math.nan,
        "gap_to_floor": (last.loss - last.loss_floor) if last else math.nan,
        "merges": len(merges),
        "tokens_total": max((e.tokens_total for e in events if isinstance(e, (ev.Merge, ev.Eval, ev.Finished))), default=0),
        "learner_steps": sum(e.step for e in steps),
        "goodput_tokens": merged_tokens / started_tokens if started_tokens else math.nan,
        "rejections": dict(Counter(e.reason for e in events if isinstance(e, ev.Reject))),
        # Rounds: one merge per (fragment, round) on the clock; late uploads refused (late_round) or carried.
        "rounds_merged": len({(m.fragment, m.round) for m in merges}),
        "participants_per_merge": (sum(len(m.participants) for m in merges) / len(merges)) if merges else math.nan,
        "late_carried": sum(m.late for m in merges),
        "eval_curve": [(e.merges_total, e.loss) for e in evals],
        "wall_s": t1 - t0,
    }
