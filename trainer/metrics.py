"""Run summaries computed from the event logs (the one source of truth).

Two kinds of token, never one figure for both (docs/events.md):

- a **trained token** is one token a learner trained on (its ``step`` events count them, per incarnation);
- a **contribution token** is a trained token sent for merging *for one fragment* (a contribution's ``c_tokens``:
  the tokens trained since the learner last received that fragment), so each trained token is P of them.

The syncer counts trained tokens toward the budget (``tokens_total``, as learners report them); merges take
contribution tokens (``contribution_tokens_merged``), which cover ``trained_tokens_merged`` trained tokens, each
once (:mod:`trainer.core.merged_tokens`): compute goodput is that ÷ ``trained_tokens``.

Example:
    metrics = summarize_run("runs/demo")
    print(metrics.final_eval_loss, metrics.loss_floor)
    metrics.write(Path("runs/demo/metrics.json"))
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainer import events as ev
from trainer.core.merged_tokens import MergedTokens


class RunSummary(BaseModel):
    """A run's key numbers, what a chaos report quotes. The defaults are a run with no events: NaN where a number
    needs an eval or a merge, zero where it counts them.

    >>> RunSummary(merges=3).model_dump()["merges"], math.isnan(RunSummary().final_eval_loss)
    (3, True)
    """

    model_config = ConfigDict(ser_json_inf_nan="constants")  # NaN stays NaN in the JSON, as json.dumps writes it
    final_eval_loss: float = math.nan
    final_eval_is_final: bool = False  # False: the run stopped before its final eval; the last one is quoted
    loss_floor: float = math.nan
    gap_to_floor: float = math.nan
    merges: int = 0
    tokens_total: int = 0  # trained tokens the syncer counted toward the budget (as learners reported them)
    trained_tokens: int = 0  # trained tokens, the learners' own count (every incarnation)
    trained_tokens_merged: int = 0  # trained tokens merges took, each once (compute goodput's numerator)
    contribution_tokens_uploaded: int = 0  # contribution tokens learners sent (a trained token once per fragment)
    contribution_tokens_merged: int = 0  # contribution tokens merges took
    learner_steps: int = 0
    uploads_merged: float = math.nan  # contribution tokens merged / uploaded
    rejections: dict[str, int] = {}  # by reason
    # Rounds: one merge per (fragment, round) on the clock; late uploads refused (late_round) or carried.
    rounds_merged: int = 0
    participants_per_merge: float = math.nan
    late_carried: int = 0
    wall_s: float = 0.0


class RunMetrics(RunSummary):
    """The summary and the eval curve: a run's ``metrics.json``."""

    eval_curve: list[tuple[int, float]] = []  # (merges so far, eval loss) of every eval
    exit_codes: dict[str, int | None] = {}  # each process's, when trainer.launch ran them (None: still running)

    def summary(self) -> RunSummary:
        return RunSummary.model_validate(self.model_dump(exclude={"eval_curve"}))

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2))

    @classmethod
    def read(cls, path: Path) -> RunMetrics:
        return cls.model_validate(json.loads(path.read_text()))  # json.loads: NaN as written


def final_eval(events: Iterable[Any]) -> ev.Eval | None:
    """The run's final eval, or its last one when it never made a final one (stopped early, crashed)."""
    evals = [e for e in events if isinstance(e, ev.Eval)]
    finals = [e for e in evals if e.final]
    return (finals or evals)[-1] if evals else None


def trained_tokens(events: Iterable[ev.Event]) -> dict[str, int]:
    """Trained tokens of each learner, summed over its incarnations (each restarts its counter at zero): the most any
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
    """Trained tokens of each learner that merges took, each once (trainer.core.merged_tokens): ≤ what it trained."""
    book = MergedTokens(num_fragments)
    for m in events:
        if isinstance(m, ev.Merge):
            for p in m.participants:
                book.add(p.learner_id, p.incarnation, m.fragment, p.base_version, p.c_tokens)
    return book.per_learner


def summarize_run(run_dir: str | Path) -> RunMetrics:
    """Final eval loss, loss floor, merges, tokens, goodput and rejections of a run."""
    return summarize_events(list(ev.iter_run_events(run_dir)))


def summarize_events(events: list[ev.Event]) -> RunMetrics:
    """:func:`summarize_run` of a run's events, in time order."""
    evals = [e for e in events if isinstance(e, ev.Eval)]
    merges = [e for e in events if isinstance(e, ev.Merge)]
    syncs = [e for e in events if isinstance(e, ev.SyncStartEvent)]
    contributed = sum(p.c_tokens for m in merges for p in m.participants)
    sent = sum(s.c_tokens for s in syncs)
    starts = [e for e in events if isinstance(e, ev.SyncerStart)]
    fragments = len(starts[0].versions) if starts else 1
    steps = [e for e in events if isinstance(e, ev.LearnerStop)]
    last = final_eval(evals)
    t0 = min((e.ts for e in events), default=0.0)
    t1 = max((e.ts for e in events), default=0.0)
    return RunMetrics(
        final_eval_loss=last.loss if last else math.nan,
        final_eval_is_final=bool(last and last.final),
        loss_floor=last.loss_floor if last else math.nan,
        gap_to_floor=(last.loss - last.loss_floor) if last else math.nan,
        merges=len(merges),
        tokens_total=max(
            (e.tokens_total for e in events if isinstance(e, (ev.Merge, ev.Eval, ev.Finished))), default=0
        ),
        trained_tokens=sum(trained_tokens(events).values()),
        trained_tokens_merged=sum(merged_tokens(events, fragments).values()),
        contribution_tokens_uploaded=sent,
        contribution_tokens_merged=contributed,
        learner_steps=sum(e.step for e in steps),
        uploads_merged=contributed / sent if sent else math.nan,
        rejections=dict(
            sum((Counter({e.reason: 1 + e.repeats}) for e in events if isinstance(e, ev.Reject)), Counter())
        ),
        rounds_merged=len({(m.fragment, m.round) for m in merges}),
        participants_per_merge=(sum(len(m.participants) for m in merges) / len(merges)) if merges else math.nan,
        late_carried=sum(m.late for m in merges),
        eval_curve=[(e.merges_total, e.loss) for e in evals],
        wall_s=t1 - t0,
    )
