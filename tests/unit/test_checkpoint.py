"""Unit tests for trainer.checkpoint (atomic .npz checkpoints, newest readable wins)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from trainer.checkpoint import (
    KEEP,
    NoIntactCheckpoint,
    list_checkpoints,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)
from trainer.core.credentials import checkpoint_key
from trainer.errors import CheckpointError


def _arrays(k: float) -> dict[str, np.ndarray]:
    return {
        "param/w": np.full((2, 3), k, np.float32),
        "opt/0/0": np.arange(4, dtype=np.float32) * k,
        "scalar": np.asarray(k),
    }


def _meta(k: int) -> dict:
    return {
        "versions": [k, max(k - 1, 0)],
        "merges_total": k,
        "tokens_by_incarnation": {"a/i": 10 * k},
        "finished": False,
    }


def test_round_trip(tmp_path):
    arrays = _arrays(1.5)
    meta = _meta(3)
    path = save_checkpoint(tmp_path, arrays, meta)
    assert path.exists() and path.name == "ckpt-0000000003.npz"
    got_arrays, got_meta, got_path = load_latest(tmp_path)
    assert got_path == path
    assert got_meta == meta
    assert got_arrays.keys() == arrays.keys()  # __meta__ is not returned as an array
    for k, v in arrays.items():
        np.testing.assert_array_equal(got_arrays[k], v)
        assert got_arrays[k].dtype == v.dtype and got_arrays[k].shape == v.shape


def test_save_creates_the_directory(tmp_path):
    d = tmp_path / "a" / "b"
    save_checkpoint(d, _arrays(1), _meta(1))
    assert load_latest(d) is not None


def test_newest_wins(tmp_path):
    for k in (1, 7, 3):
        save_checkpoint(tmp_path, _arrays(float(k)), _meta(k))
    arrays, meta, path = load_latest(tmp_path)
    assert meta["merges_total"] == 7
    assert path.name == "ckpt-0000000007.npz"
    np.testing.assert_array_equal(arrays["param/w"], np.full((2, 3), 7.0, np.float32))


def test_newest_is_by_number_not_by_text(tmp_path):
    save_checkpoint(tmp_path, _arrays(9), _meta(9))
    save_checkpoint(tmp_path, _arrays(10), _meta(10))
    assert load_latest(tmp_path)[1]["merges_total"] == 10


def _corrupt(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"not a checkpoint at all " * 20)
    elif how == "flipped":
        mid = len(data) // 3
        path.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :])
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["garbage", "empty", "truncated", "flipped"])
def test_corrupt_newest_is_skipped_and_previous_loads(tmp_path, how, capsys):
    save_checkpoint(tmp_path, _arrays(1.0), _meta(1))
    newest = save_checkpoint(tmp_path, _arrays(2.0), _meta(2))
    _corrupt(newest, how)
    result = load_latest(tmp_path)
    assert result is not None
    arrays, meta, path = result
    assert meta["merges_total"] == 1
    assert path.name == "ckpt-0000000001.npz"
    np.testing.assert_array_equal(arrays["param/w"], np.full((2, 3), 1.0, np.float32))
    assert "skipping" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["garbage", "empty", "truncated", "flipped"])
def test_read_checkpoint_raises_checkpoint_error_for_corrupt_files(tmp_path, how):
    path = save_checkpoint(tmp_path, _arrays(1.0), _meta(1))
    _corrupt(path, how)
    with pytest.raises(CheckpointError, match=str(path.name)):
        read_checkpoint(path)


def test_with_every_checkpoint_corrupt_the_restore_refuses_naming_each(tmp_path):
    """Invariant `restore-integrity` (docs/security.md): no silent start from scratch."""
    for k in (1, 2):
        _corrupt(save_checkpoint(tmp_path, _arrays(1.0), _meta(k)), "garbage")
    with pytest.raises(NoIntactCheckpoint, match="--start-fresh") as err:
        load_latest(tmp_path)
    assert [p.split(":")[0].rsplit("/", 1)[-1] for p in err.value.problems] == [
        "ckpt-0000000002.npz",
        "ckpt-0000000001.npz",
    ]


def test_a_restore_serves_only_a_checkpoint_whose_digest_matches(tmp_path):
    """Invariant `restore-integrity`: altered contents, another key's digest, no digest or an unkeyed one where the
    run has a key: each skipped for the older intact checkpoint."""
    key = checkpoint_key("s3cret")
    save_checkpoint(tmp_path, _arrays(1.0), _meta(1), key=key)
    bad = save_checkpoint(tmp_path, _arrays(2.0), _meta(2), key=key)
    with np.load(bad) as z:  # the same file with one value changed and its digest kept
        arrays = {k: z[k] for k in z.files}
    arrays["param/w"] = arrays["param/w"] + 1
    altered = tmp_path / "ckpt-0000000003.npz"
    np.savez(altered, **arrays)
    elsewhere = tmp_path / "elsewhere"  # written apart: saving here would rotate the intact ones away
    forged = save_checkpoint(elsewhere, _arrays(4.0), _meta(4), key=checkpoint_key("another secret"))
    unkeyed = save_checkpoint(elsewhere, _arrays(5.0), _meta(5))  # SHA-256 only: anyone can write that
    forged.rename(tmp_path / forged.name)
    unkeyed.rename(tmp_path / unkeyed.name)
    for name, why in (
        ("ckpt-0000000003.npz", "does not match"),
        ("ckpt-0000000004.npz", "does not match"),
        ("ckpt-0000000005.npz", "no hmac-sha256 digest"),
    ):
        with pytest.raises(CheckpointError, match=why):
            read_checkpoint(tmp_path / name, key, verify=True)
    got = load_latest(tmp_path, key=key, verify=True)
    assert got is not None and got[2].name == "ckpt-0000000002.npz" and got[1]["merges_total"] == 2
    assert read_checkpoint(tmp_path / "ckpt-0000000005.npz")[1]["merges_total"] == 5  # no key: SHA-256 checked


def test_a_restore_skips_a_checkpoint_its_check_finds_wrong(tmp_path):
    save_checkpoint(tmp_path, _arrays(1.0), _meta(1))
    save_checkpoint(tmp_path, {"param/w": np.array([np.nan, 1.0], np.float32)}, _meta(2))

    def finite(arrays):
        return [f"{k} holds NaN or Inf" for k, v in arrays.items() if not np.all(np.isfinite(v))]

    got = load_latest(tmp_path, verify=True, check=finite)
    assert got is not None and got[1]["merges_total"] == 1


def test_npz_without_metadata_is_refused(tmp_path):
    path = tmp_path / "ckpt-0000000005.npz"
    np.savez(path, w=np.ones(2))
    with pytest.raises(CheckpointError, match="no metadata"):
        read_checkpoint(path)


def test_only_the_newest_keep_files_are_kept(tmp_path):
    for k in range(1, KEEP + 4):
        save_checkpoint(tmp_path, _arrays(float(k)), _meta(k * 10))
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == [f"ckpt-{k * 10:010d}.npz" for k in range(4, KEEP + 4)]
    assert len(names) == KEEP


def test_rotation_keeps_files_named_above_the_one_written(tmp_path):
    """Files named above the newest written are not the run's past (a restore skipped them, or they were planted):
    rotating by name alone deleted each new checkpoint as it was written (tests/unit/test_restore_versions.py)."""
    for k in (50, 60, 70):
        (tmp_path / f"ckpt-{k:010d}.npz").write_bytes(b"junk")
    for k in range(1, KEEP + 3):
        save_checkpoint(tmp_path, _arrays(float(k)), _meta(k))
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == [f"ckpt-{k:010d}.npz" for k in [*range(3, KEEP + 3), 50, 60, 70]]


def test_a_checkpoint_is_named_by_the_highest_of_its_merges_and_versions(tmp_path):
    path = save_checkpoint(tmp_path, _arrays(1.0), {"merges_total": 4, "versions": [9, 2]})
    assert path.name == "ckpt-0000000009.npz" and load_latest(tmp_path)[2] == path


def test_no_temp_files_left_behind(tmp_path):
    for k in range(1, 6):
        save_checkpoint(tmp_path, _arrays(float(k)), _meta(k))
    leftovers = sorted(os.listdir(tmp_path))
    assert leftovers == [p.name for p in list_checkpoints(tmp_path)]
    assert not any("tmp" in n for n in leftovers)


def test_other_files_are_ignored(tmp_path):
    save_checkpoint(tmp_path, _arrays(2.0), _meta(2))
    (tmp_path / "ckpt-99.npz").write_bytes(b"junk")  # not 10 digits
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / ".ckpt-0000000009.npz.tmp-1").write_bytes(b"torn")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-0000000002.npz"]
    assert load_latest(tmp_path)[1]["merges_total"] == 2


def test_load_latest_on_empty_or_missing_dir_returns_none(tmp_path):
    assert load_latest(tmp_path) is None
    assert load_latest(tmp_path / "does-not-exist") is None
    assert list_checkpoints(tmp_path / "does-not-exist") == []


def test_reserved_array_name_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="__meta__"):
        save_checkpoint(tmp_path, {"__meta__": np.zeros(1)}, {})
    assert list_checkpoints(tmp_path) == []


def test_loading_never_needs_pickle(tmp_path):
    path = save_checkpoint(tmp_path, _arrays(1.0), _meta(1))
    with np.load(path, allow_pickle=False) as z:
        assert z["__meta__"].dtype == np.uint8


@pytest.mark.parametrize("blob", [b"{not json", b"\xff\xfe\x00garbage"])
def test_unparseable_metadata_is_skipped_like_any_corrupt_file(tmp_path, blob):
    save_checkpoint(tmp_path, _arrays(1.0), _meta(1))
    bad = tmp_path / "ckpt-0000000002.npz"
    np.savez(bad, __meta__=np.frombuffer(blob, dtype=np.uint8), w=np.ones(2))
    with pytest.raises(CheckpointError, match=bad.name):
        read_checkpoint(bad)
    arrays, meta, path = load_latest(tmp_path)
    assert meta["merges_total"] == 1 and path.name == "ckpt-0000000001.npz"
