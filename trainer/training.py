"""The pieces of inner training shared by learners, the syncer's evaluator and benchmarks.

Example:
    >>> from trainer.config import RunConfig
    >>> setup = TrainingSetup.from_config(RunConfig())
    >>> params = setup.init_params()
    >>> state = setup.optimizer.init(params)
    >>> batch = next(setup.batches(learner_id="learner-0", incarnation_index=0))
    >>> params, state, loss = setup.train_step(params, state, batch)
    >>> bool(loss > 0)
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trainer import data as data_mod
from trainer import model as model_mod
from trainer import text_source
from trainer.config import InnerSection, RunConfig
from trainer.core.outer import AdamWSpec, adamw, progress_scale

Params = dict[str, jax.Array]

EVAL_BATCH = 64  # sequences per eval batch, whatever the training batch (one size for every config)


def adamw_spec(inner: InnerSection) -> AdamWSpec:
    """The inner optimizer's settings as the core's :class:`~trainer.core.outer.AdamWSpec`."""
    return AdamWSpec(
        lr=inner.lr,
        b1=inner.b1,
        b2=inner.b2,
        weight_decay=inner.weight_decay,
        warmup_steps=inner.warmup_steps,
        grad_clip=inner.grad_clip,
        decay=inner.decay,
        final_lr_fraction=inner.final_lr_fraction,
    )


def inner_optimizer(inner: InnerSection) -> optax.GradientTransformation:
    """AdamW with linear warmup (per incarnation), after global-norm clipping (:func:`trainer.core.outer.adamw`).

    The decay is :func:`lr_scale` of the run's *global* token progress, which the syncer reports.
    """
    return adamw(adamw_spec(inner))


def lr_scale(inner: InnerSection, progress: float) -> float:
    """Multiplier of the inner learning rate at global ``progress`` (tokens trained / budget).

    >>> from trainer.config import InnerSection
    >>> [round(lr_scale(InnerSection(final_lr_fraction=0.1), p), 3) for p in (0.0, 0.5, 1.0, 2.0)]
    [1.0, 0.55, 0.1, 0.1]
    """
    return progress_scale(adamw_spec(inner), progress)


def learner_seed_index(learner_id: str) -> int:
    """A stable integer for a learner id (its data stream key)."""
    return int.from_bytes(hashlib.sha256(learner_id.encode()).digest()[:4], "little")


@dataclass(frozen=True)
class TrainingSetup:
    """Model, data source and optimizer of a run, all derived from the config's seed."""

    config: RunConfig
    model: model_mod.ModelConfig
    source: data_mod.TokenSource
    optimizer: optax.GradientTransformation

    @classmethod
    def from_config(cls, config: RunConfig) -> TrainingSetup:
        mcfg = model_mod.sized(config.model.size, config.data.model_vocab, config.model.compute_dtype)
        source: data_mod.TokenSource
        if config.data.source == "text":
            source = text_source.from_corpus()
        else:
            source = data_mod.MarkovSource.create(
                mcfg.vocab_size,
                config.data.order,
                config.data.concentration,
                seed=config.seed,
                older_classes=config.data.older_classes,
            )
        return cls(config, mcfg, source, inner_optimizer(config.inner))

    @property
    def tokens_per_step(self) -> int:
        return self.config.inner.batch_size * self.model.seq_len

    def init_params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in model_mod.init_params(self.model, self.config.seed).items()}

    def batches(self, learner_id: str, incarnation_index: int) -> data_mod.LearnerBatches:
        seed, learner_key, incarnation = self.data_stream(learner_id, incarnation_index)
        return data_mod.learner_batches(
            self.source, seed, learner_key, incarnation, self.config.inner.batch_size, self.model.seq_len
        )

    def data_stream(self, learner_id: str, incarnation_index: int) -> list[int]:
        """The key of the learner incarnation's data stream: (seed, the learner's data key, incarnation index)."""
        return [self.config.seed, learner_seed_index(learner_id), incarnation_index]

    def eval_set(self) -> np.ndarray:
        """``data.eval_tokens`` held-out tokens (rounded up to whole batches of ``EVAL_BATCH`` sequences)."""
        per_batch = EVAL_BATCH * self.model.seq_len
        n_batches = -(-self.config.data.eval_tokens // per_batch)
        return data_mod.eval_set(self.source, self.config.seed, n_batches, EVAL_BATCH, self.model.seq_len)

    def loss_floor(self) -> float:
        return float(self.source.loss_floor(self.model.seq_len))

    @property
    def train_step(self):
        return _train_step(self.model, self.optimizer)

    @property
    def grad_step(self):
        """``(params, batch) -> (loss, gradients)``: a data-parallel learner's step (the syncer applies AdamW)."""
        return _grad_step(self.model)

    @property
    def eval_loss(self):
        return _eval_loss(self.model)

    def evaluate(self, params: dict[str, np.ndarray], eval_set: np.ndarray | None = None) -> float:
        """Mean loss of ``params`` over the held-out eval set."""
        batches = self.eval_set() if eval_set is None else eval_set
        fn = self.eval_loss
        jparams = {k: jnp.asarray(v) for k, v in params.items()}
        return float(np.mean([float(fn(jparams, jnp.asarray(b))) for b in batches]))


_STEP_CACHE: dict[tuple, Any] = {}  # jitted functions (jax is untyped); for a train step, (tx, step)


def _train_step(mcfg: model_mod.ModelConfig, tx: optax.GradientTransformation):
    key = ("train", mcfg, id(tx))
    if key not in _STEP_CACHE:

        @jax.jit
        def step(params: Params, opt_state, batch: jax.Array, scale: float | jax.Array = 1.0):
            loss, grads = jax.value_and_grad(model_mod.loss_fn)(params, mcfg, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            # AdamW's update (weight decay included) is linear in lr: scaling it is AdamW at lr × scale.
            updates = jax.tree_util.tree_map(lambda u: u * scale, updates)
            return optax.apply_updates(params, updates), opt_state, loss

        _STEP_CACHE[key] = (tx, step)  # keep tx alive so id() stays unique
    return _STEP_CACHE[key][1]


def _grad_step(mcfg: model_mod.ModelConfig):
    key = ("grad", mcfg)
    if key not in _STEP_CACHE:
        _STEP_CACHE[key] = jax.jit(
            lambda params, batch: jax.value_and_grad(model_mod.loss_fn)(params, mcfg, batch)
        )
    return _STEP_CACHE[key]


def _eval_loss(mcfg: model_mod.ModelConfig):
    key = ("eval", mcfg)
    if key not in _STEP_CACHE:
        _STEP_CACHE[key] = jax.jit(lambda params, batch: model_mod.loss_fn(params, mcfg, batch))
    return _STEP_CACHE[key]
