"""The syncer's policy: the algorithm (resolved once: :class:`~trainer.core.algorithm.Algorithm`) and the syncer's
own settings, which together decide everything :class:`~trainer.core.syncer_state.SyncerState` does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.core.algorithm import Algorithm
from trainer.core.claims import ADAM_STEP_BOUND
from trainer.core.drift import DRIFT_WINDOW
from trainer.core.outer import AdamWSpec, adamw, outer_optimizer, progress_scale

__all__ = [
    "SyncerPolicy",
    "PLANTED_BUGS",
    "STEP_SLACK",
    "restore_version_skip",
]


@dataclass(frozen=True)
class SyncerPolicy:
    """Everything that decides the syncer's behaviour: the algorithm (resolved once:
    :class:`~trainer.core.algorithm.Algorithm`, its settings under their config names) and the syncer's own."""

    algorithm: Algorithm
    mean_tensors: tuple[str, ...] = ("embed",)
    # Data-parallel: the merged mean gradient goes through this AdamW (lr scaled by token progress) instead
    # of the Nesterov outer step above; the learners only compute gradients.
    outer_adamw: AdamWSpec | None = None
    token_budget: int = 0  # 0: no budget
    # After the budget, keep merging for up to this long while a learner the syncer has seen is away or has not
    # been merged since it came back (see SyncerState.settle): a chaos run then lasts until reintegration can
    # be decided. The model and eval at the budget are the run's result; settle merges only show who is back.
    settle_s: float = 0.0
    liveness_timeout_s: float = 5.0
    # grace_waits_for heard: a round waits only for learners heard within this long (three report intervals)
    heard_within_s: float = 1.5
    ema_alpha: float = 0.2
    validate_uploads: bool = True  # off only for negative-control experiments
    checkpoint_every_merges: int = 20  # the shell checkpoints when checkpoint_due(); restores skip this many
    max_norm_ratio: float = (
        100.0  # refuse an update this many times larger than the fragment's recent ones (0: off)
    )
    # What the syncer knows instead of trusting a learner (trainer.core.claims): tokens per step from the config
    # (0: take the learner's count), how much faster than the cluster's pace a learner may step, and the inner
    # AdamW's lr and weight decay that bound one step's update (lr 0: no such bound, e.g. data-parallel gradients).
    tokens_per_step: int = 0
    max_speedup: float = 4.0
    inner_lr: float = 0.0
    inner_weight_decay: float = 0.0
    # The most one inner step moves one coordinate, in units of lr, beside the decay's lr·wd·|θ| (AdamW's normalised
    # step: trainer.core.claims.ADAM_STEP_BOUND; deterministic mode's surrogate SGD learners have their own).
    coordinate_step_bound: float = ADAM_STEP_BOUND
    # Summed over about drift_window merges of a fragment, how far one learner may pull from the rounds' medians:
    # drift_k · √drift_window lr per step (trainer.core.drift; 0, the default: summed, not enforced).
    drift_k: float = 0.0
    drift_window: float = DRIFT_WINDOW
    planted_bug: str = "none"  # tests of the test harness only: see PLANTED_BUGS

    @property
    def optimizer(self):
        """The syncer's optimizer: Nesterov SGD on outer gradients, or (data-parallel) AdamW on gradients."""
        if self.outer_adamw is not None:
            return adamw(self.outer_adamw)
        a = self.algorithm
        return outer_optimizer(a.outer_lr, a.outer_momentum, a.nesterov)

    def step_scale(self, tokens_total: int) -> float:
        """The update's multiplier: AdamW's lr decay at the run's token progress; 1 for the Nesterov step."""
        if self.outer_adamw is None:
            return 1.0
        return progress_scale(self.outer_adamw, tokens_total / self.token_budget if self.token_budget else 0.0)


# Deliberate defects a test can switch on to prove the chaos search finds and shrinks real bugs.
# "forget_rejoined": a learner that rejoins with a new incarnation keeps its old record, so every
# call of the new incarnation is refused as a stale incarnation and it never contributes again.
PLANTED_BUGS: tuple[str, ...] = ("none", "forget_rejoined")
STEP_SLACK = 4  # steps a claim may exceed what time allows: a step in flight at each end, and rounding


def restore_version_skip(
    checkpoint_every_merges: int, versions: Sequence[int] = (), newest_unreadable: int | None = None
) -> int:
    """How far a restored syncer moves every version ahead of its checkpoint's ``versions``, so that none goes
    backwards: past one checkpoint interval of merges that may have been lost since, and — where newer checkpoints
    could not be read — past the newest of their names plus an interval. A checkpoint's name is at least every
    version served when it was written (trainer.checkpoint.checkpoint_number), and at most an interval of merges
    follows the newest one; counting intervals per unreadable file instead fell short after a restore's own skip.

    >>> restore_version_skip(20), restore_version_skip(20, versions=[40, 3], newest_unreadable=80)
    (20, 97)
    """
    if newest_unreadable is None:
        return checkpoint_every_merges
    return max(checkpoint_every_merges, newest_unreadable + checkpoint_every_merges - min(versions, default=0))
