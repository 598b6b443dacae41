"""The syncer process's restore path: version skips that keep versions monotonic whatever was lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.checkpoint import list_checkpoints
from trainer.config import RunConfig
from trainer.syncer import SyncerService

pytestmark = pytest.mark.integration


def service(run_dir: Path) -> SyncerService:
    cfg = RunConfig.model_validate({"syncer": {"checkpoint_every_merges": 20}})
    return SyncerService(cfg, run_dir, exit_on_finish=False)


def test_fresh_syncer_checkpoints_at_start_and_restores_with_the_skip(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.shutdown("test")
    assert list_checkpoints(tmp_path / "checkpoints")
    again = service(tmp_path)
    try:
        assert again.state.versions == [20] * 4 and again.state.restored_from_merges == 0
        assert not again.state.checkpoint_due()  # the restore was checkpointed at once
    finally:
        again.shutdown("test")


def test_an_unreadable_newer_checkpoint_adds_an_interval_to_the_skip(tmp_path: Path) -> None:
    service(tmp_path).shutdown("test")  # writes ckpt-0000000000 (start) and the same on shutdown
    (tmp_path / "checkpoints" / "ckpt-0000000020.npz").write_bytes(b"not a zip file")
    again = service(tmp_path)
    try:
        # Up to 2 intervals may be lost: the one the broken file held and the one after it.
        assert again.state.versions == [40] * 4
    finally:
        again.shutdown("test")
