"""The syncer process's restore path: version skips that keep versions monotonic whatever was lost, and only intact
checkpoints served (docs/security.md, invariants ``restore-integrity`` and ``restore-versions``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import NoIntactCheckpoint, list_checkpoints, read_checkpoint, save_checkpoint
from trainer.config import RunConfig
from trainer.core.credentials import checkpoint_key
from trainer.syncer import SyncerService, main

SECRET = "restore-secret"

pytestmark = pytest.mark.integration


def service(run_dir: Path, secret: str | None = None, start_fresh: bool = False) -> SyncerService:
    cfg = RunConfig.model_validate({"syncer": {"checkpoint_every_merges": 20}})
    return SyncerService(cfg, run_dir, exit_on_finish=False, secret=secret, start_fresh=start_fresh)


def _plant(run_dir: Path, merges: int, change, key: bytes | None) -> Path:
    """A checkpoint at ``merges`` holding the newest one's arrays changed by ``change``, digested under ``key``:
    well-formed, as the syncer (``key`` its own) or someone else would write it."""
    arrays, meta = read_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])
    change(arrays)
    meta["merges_total"] = merges
    elsewhere = run_dir / "elsewhere"  # saving in place would rotate the intact checkpoint away
    path = save_checkpoint(elsewhere, arrays, meta, key=key)
    return path.rename(run_dir / "checkpoints" / path.name)


def _nan(arrays) -> None:
    name = next(k for k in sorted(arrays) if k.startswith("param/"))
    arrays[name] = np.full_like(arrays[name], np.nan)


def _reshaped(arrays) -> None:
    name = next(k for k in sorted(arrays) if k.startswith("param/"))
    arrays[name] = np.zeros(arrays[name].size + 1, arrays[name].dtype)


def _moved(arrays) -> None:
    name = next(k for k in sorted(arrays) if k.startswith("param/"))
    arrays[name] = arrays[name] + 1.0


@pytest.mark.parametrize(
    ("change", "key", "why"),
    [
        (_nan, checkpoint_key(SECRET), "holds NaN or Inf"),
        (_reshaped, checkpoint_key(SECRET), "has shape"),
        (_moved, checkpoint_key("not the run's secret"), "does not match"),
        (_moved, None, "no hmac-sha256 digest"),
    ],
    ids=["nan", "wrong-shape", "forged-with-another-key", "unkeyed"],
)
def test_a_restore_skips_a_checkpoint_that_is_not_intact(tmp_path: Path, capfd, change, key, why) -> None:
    """A well-formed newer checkpoint holding NaN or a wrong shape (even one of the syncer's own), or one not
    digested under the run's key, is skipped for the older intact one, and versions still jump past it."""
    service(tmp_path, SECRET).shutdown("test")  # ckpt-0000000000 at start
    planted = _plant(tmp_path, 20, change, key)
    again = service(tmp_path, SECRET)
    try:
        assert again.state.restored_from_merges == 0 and all(
            np.all(np.isfinite(v)) for v in again.state.params.values()
        )
        assert again.state.versions == [40] * 4  # the skipped one's interval is lost too
    finally:
        again.shutdown("test")
    err = capfd.readouterr().err
    assert planted.name in err and why in err, err


def test_with_no_intact_checkpoint_the_syncer_refuses_to_start_unless_told_to_start_fresh(
    tmp_path: Path, capsys
) -> None:
    service(tmp_path, SECRET).shutdown("test")
    _plant(tmp_path, 60, _nan, checkpoint_key(SECRET))
    for p in list_checkpoints(tmp_path / "checkpoints")[:-1]:
        p.write_bytes(b"not a zip file")
    with pytest.raises(NoIntactCheckpoint, match="--start-fresh"):
        service(tmp_path, SECRET)
    cfg = tmp_path / "run.yaml"
    cfg.write_text("syncer:\n  checkpoint_every_merges: 20\n")
    argv = ["--config", str(cfg), "--run-dir", str(tmp_path), "--insecure-no-auth"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no checkpoint can be restored" in err and "ckpt-0000000060.npz" in err, err
    fresh = service(tmp_path, SECRET, start_fresh=True)
    try:  # versions start above every version the broken checkpoints' syncer can have served
        assert fresh.state.versions == [80] * 4 and fresh.state.restored_from_merges == -1
        # Uploads based on version 80 can be rebased after the next merge: its values are remembered.
        assert not fresh.state.algorithm.rebases or all((p, 80) in fresh.state.past_values for p in range(4))
    finally:
        fresh.shutdown("test")


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
