"""The syncer's policy from a run config, and the fields of a merge event: pure pieces the gRPC syncer, deterministic
mode and the scale simulator share (none of them needs the other's I/O to know how a run merges)."""

from __future__ import annotations

from typing import Any

from trainer import events as ev
from trainer.config import RunConfig
from trainer.core.audit import digest
from trainer.core.syncer_policy import SyncerPolicy
from trainer.core.syncer_records import Contribution, MergeRecord, SubmitResult
from trainer.model import EMBEDDING_TENSORS, MODEL_SIZES
from trainer.training import adamw_spec

HEARD_REPORTS = 3  # grace_waits_for heard: a learner three reports overdue is not waited for


def policy_from_config(cfg: RunConfig) -> SyncerPolicy:
    a = cfg.algorithm
    if a.mode == "data-parallel":  # the learners upload gradients; one AdamW update per step, here
        outer: dict[str, Any] = dict(outer_adamw=adamw_spec(cfg.inner))
    else:  # the learners step AdamW themselves: its lr bounds what one step can move a fragment
        outer = dict(
            inner_lr=cfg.inner.lr,
            inner_weight_decay=cfg.inner.weight_decay,
        )
    return SyncerPolicy(
        algorithm=a,
        mean_tensors=EMBEDDING_TENSORS,
        **outer,
        token_budget=cfg.token_budget,
        settle_s=cfg.syncer.settle_s,
        liveness_timeout_s=cfg.syncer.liveness_timeout_s,
        heard_within_s=HEARD_REPORTS * cfg.learner.report_interval_s,
        validate_uploads=cfg.syncer.validate_uploads,
        checkpoint_every_merges=cfg.syncer.checkpoint_every_merges,
        max_norm_ratio=cfg.syncer.max_norm_ratio,
        planted_bug=cfg.syncer.planted_bug,
        tokens_per_step=cfg.inner.batch_size * MODEL_SIZES[cfg.model.size].seq_len,
        max_speedup=cfg.syncer.max_speedup,
        drift_k=cfg.syncer.drift_k,
        drift_window=cfg.syncer.drift_window,
    )


def upload_fields(c: Contribution, res: SubmitResult, nbytes: int) -> dict[str, Any]:
    """The fields of the ``upload`` event for an accepted upload (the simulator writes the same)."""
    return dict(
        learner_id=c.learner_id,
        learner_incarnation=c.incarnation,
        fragment=c.fragment,
        base_version=c.base_version,
        bytes=nbytes,
        seconds=c.upload_seconds,
        c_steps=c.c_steps,
        c_tokens=c.c_tokens,
        duplicate=res.duplicate,
        round=c.round,
        late=res.late,
        digest=digest(c.tensors),
    )


def merge_fields(rec: MergeRecord, tokens_total: int, audit: ev.MergeDigests | None = None) -> dict[str, Any]:
    """The fields of the ``merge`` event for one merge (the simulator writes the same); ``audit``: its digests."""
    decision = (
        None
        if rec.decision is None
        else ev.MergeDecision(
            contributions=rec.decision[0],
            active_learners=rec.decision[1],
            **dict(zip(("t_step", "t_quorum", "t_upload", "t_merge", "t_broadcast"), rec.decision[2])),
            awaited_learners=rec.decision[3],
        )
    )
    return dict(
        audit=audit,
        decision=decision,
        fragment=rec.fragment,
        version=rec.version,
        base_version=rec.base_version,
        participants=[
            ev.ParticipantInfo(
                learner_id=x.learner_id,
                incarnation=x.incarnation,
                weight=x.weight,
                c_steps=x.c_steps,
                c_tokens=x.c_tokens,
                base_version=x.base_version,
                round=x.round,
                drift=x.drift,
            )
            for x in rec.participants
        ],
        rule=rec.rule,
        wait_s=rec.merged_at - rec.opened_at,
        round=rec.round,
        late=rec.late,
        held=rec.held,
        held_s=rec.held_s,
        quorum_wait_s=rec.merged_at - (rec.quorum_at if rec.quorum_at is not None else rec.merged_at),
        due_wait_s=None if rec.eligible_at is None else rec.merged_at - rec.eligible_at,
        outer_grad_norm=rec.outer_grad_norm,
        merges_total=rec.merges_total,
        tokens_total=tokens_total,
    )
