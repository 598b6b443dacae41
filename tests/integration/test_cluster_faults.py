"""Real processes over real gRPC on loopback: training, learner kill/rejoin, syncer kill/resume."""

from __future__ import annotations

import pytest

from tests.support import tiny_config, wait_until
from trainer.config import learner_ids
from trainer.launch import LocalCluster

pytestmark = pytest.mark.integration


def _cfg():
    # A budget far beyond the test: the test decides when to stop.
    return tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 3,
            "algorithm.num_fragments": 4,
            "algorithm.sync_every": 8,
            "syncer.checkpoint_every_merges": 10,
            "syncer.eval_every_merges": 10,
            "syncer.liveness_timeout_s": 3.0,
        }
    )


def _learner(status, lid):
    return next((x for x in status.learners if x.learner_id == lid), None)


def test_learner_sigkill_keeps_merging_and_restart_rejoins(tmp_path):
    cluster = LocalCluster(_cfg(), tmp_path / "run")
    try:
        cluster.start_syncer()
        for lid in learner_ids(3):
            cluster.start_learner(lid)
        with cluster.client() as c:
            first = wait_until(lambda: (s := c.status()).eval_merges >= 0 and s, 120, "a first evaluation")
            start_loss = first.eval_loss
            trained = wait_until(
                lambda: (s := c.status()).eval_loss < start_loss - 0.5 and s,
                180,
                f"eval loss to fall well below its first value {start_loss:.3f}",
            )
            assert trained.eval_loss < start_loss - 0.5

            cluster.kill("learner-1")
            killed_at = c.status().merges
            wait_until(
                lambda: not _learner(c.status(), "learner-1").active, 30, "learner-1 to be seen as inactive"
            )
            after = wait_until(
                lambda: (s := c.status()).merges >= killed_at + 12 and s,
                60,
                "merges to keep happening with learner-1 dead",
            )
            assert after.merges >= killed_at + 12

            cluster.start_learner("learner-1")
            back = wait_until(
                lambda: (
                    (x := _learner(c.status(), "learner-1"))
                    and x.incarnation_index == 1
                    and x.merged_contributions > 0
                    and x
                ),
                120,
                "the restarted learner-1 to have an upload merged",
            )
            assert back.incarnation_index == 1 and back.active
    finally:
        codes = cluster.stop_all()
    assert all(code is not None for code in codes.values()), "a child process was left running"


def test_syncer_sigkill_resumes_from_checkpoint_with_versions_continuing(tmp_path):
    cluster = LocalCluster(_cfg(), tmp_path / "run")
    try:
        port = int(cluster.start_syncer(port=0).rsplit(":", 1)[1])
        for lid in learner_ids(3):
            cluster.start_learner(lid)
        with cluster.client() as c:
            wait_until(lambda: c.status().merges >= 25, 180, "25 merges before the crash")
            before = c.status()
        cluster.kill("syncer")
        assert not cluster.alive("syncer")
        cluster.start_syncer(port=port)
        with cluster.client() as c:
            restored = wait_until(lambda: (s := c.status()) and s, 60, "the restarted syncer to answer")
            assert restored.restored_from_merges >= 0, "the syncer did not restore a checkpoint"
            # At most one checkpoint interval lost.
            assert restored.restored_from_merges >= before.merges - 10
            # Versions never go backwards, fragment by fragment.
            assert all(a >= b for a, b in zip(restored.versions, before.versions)), (
                restored.versions,
                before.versions,
            )
            merged_again = wait_until(
                lambda: (
                    (s := c.status()).merges >= restored.restored_from_merges + 10
                    and sum(1 for x in s.learners if x.merged_contributions > 0) >= 2
                    and s
                ),
                120,
                "learners to rejoin the restarted syncer and be merged again",
            )
            assert all(a >= b for a, b in zip(merged_again.versions, restored.versions))
    finally:
        codes = cluster.stop_all()
    assert all(code is not None for code in codes.values())
    # The syncer's SIGTERM shutdown wrote a final checkpoint.
    assert (tmp_path / "run" / "checkpoints").is_dir()
