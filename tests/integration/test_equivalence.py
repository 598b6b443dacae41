"""One learner, H = 1, outer SGD lr 1 without momentum == plain AdamW training.

Run over real gRPC (data-parallel mode with M = 1): every inner step's
parameters go to the syncer, which applies Θ − 1·(Θ − θ) = θ and sends them
back. The final global parameters must equal plain AdamW from the same init
on the same data stream for the same number of steps.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.support import tiny_config
from trainer.checkpoint import read_checkpoint
from trainer.launch import train
from trainer.training import TrainingSetup

pytestmark = pytest.mark.integration


def test_single_learner_h1_equals_plain_adamw(tmp_path):
    cfg = tiny_config(**{"algorithm.mode": "data-parallel", "algorithm.num_learners": 1,
                         "algorithm.num_fragments": 3, "token_budget": 30 * 16 * 64,
                         "learner.report_interval_s": 0.1})
    run_dir = tmp_path / "run"
    metrics = train(cfg, run_dir, timeout_s=300, progress=False)
    assert metrics["exit_codes"]["learner-0"] == 0
    arrays, meta = read_checkpoint(run_dir / "final.npz")
    steps = meta["versions"][0]
    assert steps >= 20 and len(set(meta["versions"])) == 1, meta["versions"]
    merged = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("param/")}

    setup = TrainingSetup.from_config(cfg)
    params = {k: jnp.asarray(v) for k, v in setup.init_params().items()}
    state = setup.optimizer.init(params)
    batches = setup.batches("learner-0", 0)
    for _ in range(steps):
        params, state, _ = setup.train_step(params, state, jnp.asarray(next(batches)))
    for name, value in params.items():
        np.testing.assert_allclose(merged[name], np.asarray(value), rtol=1e-4, atol=1e-5, err_msg=name)
    # And it really trained: the parameters moved away from init.
    init = setup.init_params()
    assert max(float(np.abs(merged[n] - init[n]).max()) for n in init) > 1e-3
