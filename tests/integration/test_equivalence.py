"""Data-parallel over real gRPC is gradient averaging with one AdamW.

Every step each learner uploads the gradient of its own batch; the syncer
averages them and applies one AdamW update (clipping, warmup, weight decay);
every learner receives the same parameters. With two learners that is plain
AdamW on the two batches side by side (the mean of two equal-sized batches'
mean losses is the mean loss of their concatenation), so the final global
parameters must equal single-process AdamW on the concatenated batches, step
for step. Per-learner AdamW followed by parameter averaging (what this mode
was before) differs from it after the first step.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.support import tiny_config
from trainer.checkpoint import read_checkpoint
from trainer.events import read_events
from trainer.launch import train
from trainer.training import TrainingSetup

pytestmark = pytest.mark.integration


def test_two_learner_data_parallel_equals_adamw_on_their_concatenated_batches(tmp_path):
    cfg = tiny_config(
        **{
            "algorithm.mode": "data-parallel",
            "algorithm.num_learners": 2,
            "token_budget": 2 * 25 * 16 * 64,
            "learner.report_interval_s": 0.1,
            # the global-progress LR decay depends on when reports arrive: compare without it
            "inner.decay": "constant",
            "inner.warmup_steps": 5,
        }
    )
    run_dir = tmp_path / "run"
    metrics = train(cfg, run_dir, timeout_s=300, progress=False)
    assert set(metrics.exit_codes.values()) == {0}, metrics.exit_codes
    arrays, meta = read_checkpoint(run_dir / "final.npz")
    (steps,) = meta["versions"]  # one fragment: one merge per step
    assert steps >= 20, steps
    merged = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("param/")}
    # Who is in each merge: both learners, except that the budget's final flush may merge one alone.
    merges = [e for e in read_events(run_dir / "events" / "syncer.jsonl") if e.kind == "merge"]
    together = [sorted(p.learner_id for p in m.participants) for m in merges]
    assert len(together) == steps and all(t == ["learner-0", "learner-1"] for t in together[:-1]), together

    setup = TrainingSetup.from_config(cfg)
    init = setup.init_params()
    params = {k: jnp.asarray(v) for k, v in init.items()}
    state = setup.optimizer.init(params)
    streams = {lid: setup.batches(lid, 0) for lid in ("learner-0", "learner-1")}
    for learners in together:
        batch = np.concatenate([next(streams[lid]) for lid in learners])
        params, state, _ = setup.train_step(params, state, jnp.asarray(batch))
    for name in init:
        np.testing.assert_allclose(merged[name], np.asarray(params[name]), rtol=1e-4, atol=2e-5, err_msg=name)
    # And it really trained: the parameters moved away from init.
    assert max(float(np.abs(merged[n] - init[n]).max()) for n in init) > 1e-3
