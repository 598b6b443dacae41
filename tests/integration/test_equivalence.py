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
from trainer.core.fragments import partition_tensors
from trainer.launch import train
from trainer.training import TrainingSetup

pytestmark = pytest.mark.integration


def test_single_learner_h1_equals_plain_adamw(tmp_path):
    cfg = tiny_config(**{"algorithm.mode": "data-parallel", "algorithm.num_learners": 1,
                         "algorithm.num_fragments": 3, "token_budget": 30 * 16 * 64,
                         "learner.report_interval_s": 0.1,
                         # the global-progress LR decay depends on report timing: compare plain AdamW
                         "inner.decay": "constant"})
    run_dir = tmp_path / "run"
    metrics = train(cfg, run_dir, timeout_s=300, progress=False)
    assert metrics["exit_codes"]["learner-0"] == 0
    arrays, meta = read_checkpoint(run_dir / "final.npz")
    versions = meta["versions"]
    # The budget can stop the run between two fragments' uploads of one step, so
    # fragment p holds the parameters after versions[p] inner steps.
    assert min(versions) >= 20 and max(versions) - min(versions) <= 1, versions
    merged = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("param/")}

    setup = TrainingSetup.from_config(cfg)
    init = setup.init_params()
    fragments = partition_tensors({k: int(v.size) for k, v in init.items()}, cfg.algorithm.num_fragments)
    params = {k: jnp.asarray(v) for k, v in init.items()}
    state = setup.optimizer.init(params)
    batches = setup.batches("learner-0", 0)
    after: dict[int, dict[str, np.ndarray]] = {}
    for step in range(1, max(versions) + 1):
        params, state, _ = setup.train_step(params, state, jnp.asarray(next(batches)))
        if step in versions:
            after[step] = {k: np.asarray(v) for k, v in params.items()}
    for frag, version in zip(fragments, versions):
        for name in frag.names:
            np.testing.assert_allclose(merged[name], after[version][name], rtol=1e-4, atol=1e-5, err_msg=name)
    # And it really trained: the parameters moved away from init.
    assert max(float(np.abs(merged[n] - init[n]).max()) for n in init) > 1e-3
