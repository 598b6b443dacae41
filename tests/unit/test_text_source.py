"""Real text as a token source (trainer.text_source): a fixed split, windows that never touch held-out bytes."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import text_source
from trainer.config import build_config
from trainer.text_source import BLOCK_BYTES, EVAL_EVERY, TextSource
from trainer.training import TrainingSetup


def _held(src: TextSource) -> np.ndarray:
    mask = np.zeros(len(src.data), bool)
    for a, b in src.eval_blocks:
        mask[a:b] = True
    return mask


def test_training_windows_never_touch_a_held_out_byte() -> None:
    src = TextSource(np.zeros(25 * BLOCK_BYTES + 123, np.uint8))
    held = np.concatenate([[0], np.cumsum(_held(src))])
    for length in (65, 129, BLOCK_BYTES):
        starts = src.window_starts(np.random.default_rng(length), 20_000, length)
        assert ((starts >= 0) & (starts + length <= len(src.data))).all()
        assert (held[starts + length] - held[starts] == 0).all()  # no held-out byte inside any window


def test_every_training_window_can_be_drawn() -> None:
    """Uniform over the allowed windows: the first and the last start of each run both occur."""
    src = TextSource(np.zeros(EVAL_EVERY * 2 * BLOCK_BYTES, np.uint8))
    length = BLOCK_BYTES * (EVAL_EVERY - 1) - 5  # 6 windows in each full run
    starts = set(src.window_starts(np.random.default_rng(0), 2000, length).tolist())
    expected = {a + k for a, _ in src.train_runs for k in range(6)}
    assert starts == expected


def test_the_split_is_a_tenth_in_whole_blocks_and_disjoint() -> None:
    src = TextSource(np.zeros(100 * BLOCK_BYTES, np.uint8))
    assert src.eval_bytes == 10 * BLOCK_BYTES and src.train_bytes == 90 * BLOCK_BYTES
    train = np.zeros(len(src.data), bool)
    for a, b in src.train_runs:
        train[a:b] = True
    assert not (train & _held(src)).any() and (train | _held(src)).all()


def test_eval_windows_tile_the_held_out_blocks_in_order() -> None:
    data = (np.arange(30 * BLOCK_BYTES) % 251).astype(np.uint8)
    src = TextSource(data)
    rows = src.eval_rows(n_batches=100, batch=4, length=129, seed=5)
    per_block = BLOCK_BYTES // 129
    assert rows.shape == (3 * per_block // 4, 4, 129)
    flat = rows.reshape(-1, 129)
    a = src.eval_blocks[0][0]
    assert np.array_equal(flat[0], data[a : a + 129]) and np.array_equal(flat[1], data[a + 129 : a + 258])
    assert np.array_equal(rows, src.eval_rows(n_batches=100, batch=4, length=129, seed=6))  # not seeded


def test_a_window_longer_than_any_run_is_refused() -> None:
    src = TextSource(np.zeros(3 * BLOCK_BYTES, np.uint8))
    with pytest.raises(ValueError, match="no training run"):
        src.sample(np.random.default_rng(0), 1, 3 * BLOCK_BYTES + 1)


def test_the_corpus_trains_a_byte_level_model() -> None:
    """data.source: text gives V = 256, batches of corpus bytes per learner stream, and the same eval set for every
    seed; the Markov settings are refused with it."""
    a = TrainingSetup.from_config(build_config({"seed": 0, "data": {"source": "text"}}))
    b = TrainingSetup.from_config(build_config({"seed": 1, "data": {"source": "text"}}))
    assert a.model.vocab_size == 256 and a.source is text_source.from_corpus()
    assert np.array_equal(a.eval_set(), b.eval_set())
    x, y = next(a.batches("learner-0", 0)), next(b.batches("learner-0", 0))
    assert x.shape == (16, 65) and not np.array_equal(x, y)
    assert np.array_equal(x, next(a.batches("learner-0", 0)))  # a stream replays
    for bad, why in [({"order": 2}, "order"), ({"vocab_size": 64}, "byte-level")]:
        with pytest.raises(Exception, match=why):
            build_config({"data": {"source": "text", **bad}})
