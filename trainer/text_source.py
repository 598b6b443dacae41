"""Real text as a token source: byte-level (V = 256) windows of the pinned corpus (:mod:`trainer.corpus`).

The split is fixed, not seeded: the corpus is cut into blocks of :data:`BLOCK_BYTES`, and every
:data:`EVAL_EVERY`-th block (block ``i`` with ``i % EVAL_EVERY == EVAL_EVERY - 1``) is held out, so the eval set
samples every text in proportion and is the same for every seed — runs at different seeds are judged on the same
bytes, which pairs their comparison. A training window never crosses into a held-out block: windows are drawn
uniformly from those that lie wholly inside one run of training blocks. Eval windows tile each held-out block
without overlap, in corpus order.

Like :class:`trainer.data.MarkovSource` it has ``vocab_size``, ``sample`` (a learner's batches, from its own
generator: the data ledger's stream and count say which windows) and ``eval_rows``; its ``loss_floor`` is NaN,
since the entropy of real text is not known (docs/trainer.md quotes the bounds compressors give).

Example:
    >>> src = TextSource(np.frombuffer(bytes(range(256)) * 200, np.uint8))
    >>> rows = src.sample(np.random.default_rng(0), batch=4, length=65)
    >>> rows.shape, rows.dtype.name, src.vocab_size
    ((4, 65), 'int32', 256)
    >>> src.eval_rows(n_batches=2, batch=4, length=65).shape
    (2, 4, 65)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainer import corpus

__all__ = ["BLOCK_BYTES", "EVAL_EVERY", "TextSource", "from_corpus"]

BLOCK_BYTES = 4096
EVAL_EVERY = 10


def _is_eval(block: int) -> bool:
    return block % EVAL_EVERY == EVAL_EVERY - 1


# eq=False: identity semantics, as for MarkovSource (a generated __eq__ would compare arrays).
@dataclass(frozen=True, eq=False)
class TextSource:
    """Byte windows of ``data`` (uint8), split into training runs and held-out blocks as the module says."""

    data: np.ndarray = field(repr=False)
    vocab_size: int = 256
    # [start, end) byte ranges, derived in __post_init__.
    train_runs: tuple[tuple[int, int], ...] = field(init=False, repr=False)
    eval_blocks: tuple[tuple[int, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.data.dtype != np.uint8 or self.data.ndim != 1:
            raise ValueError("data must be a 1-d uint8 array of bytes")
        n = len(self.data)
        blocks = [(i, i * BLOCK_BYTES, min((i + 1) * BLOCK_BYTES, n)) for i in range(-(-n // BLOCK_BYTES))]
        held = tuple((a, b) for i, a, b in blocks if _is_eval(i))
        runs: list[tuple[int, int]] = []
        for i, a, b in blocks:
            if _is_eval(i):
                continue
            if runs and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b)
            else:
                runs.append((a, b))
        object.__setattr__(self, "train_runs", tuple(runs))
        object.__setattr__(self, "eval_blocks", held)

    @property
    def train_bytes(self) -> int:
        return sum(b - a for a, b in self.train_runs)

    @property
    def eval_bytes(self) -> int:
        return sum(b - a for a, b in self.eval_blocks)

    def window_starts(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
        """Where ``batch`` training windows of ``length`` bytes start: each uniform over the windows that lie wholly
        inside one training run (never touching a held-out block).

        >>> src = TextSource(np.zeros(3 * BLOCK_BYTES, np.uint8))
        >>> int(src.window_starts(np.random.default_rng(0), 1000, BLOCK_BYTES).max()) <= 2 * BLOCK_BYTES
        True
        """
        starts = np.array([a for a, _ in self.train_runs], np.int64)
        counts = np.array([max(b - a - length + 1, 0) for a, b in self.train_runs], np.int64)
        total = int(counts.sum())
        if total == 0:
            raise ValueError(f"no training run of the text holds a window of {length} bytes")
        u = rng.integers(0, total, size=batch)
        ends = np.cumsum(counts)
        run = np.searchsorted(ends, u, side="right")
        return starts[run] + (u - (ends[run] - counts[run]))

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
        """``batch`` int32 training windows of ``length`` bytes (:meth:`window_starts`)."""
        first = self.window_starts(rng, batch, length)
        return self.data[first[:, None] + np.arange(length)].astype(np.int32)

    def eval_windows(self, length: int) -> np.ndarray:
        """Every held-out window of ``length`` bytes: each held-out block tiled without overlap, in corpus order."""
        rows = [
            self.data[a + k * length : a + (k + 1) * length]
            for a, b in self.eval_blocks
            for k in range((b - a) // length)
        ]
        if not rows:
            return np.zeros((0, length), np.int32)
        return np.stack(rows).astype(np.int32)

    def eval_rows(self, n_batches: int, batch: int, length: int, seed: int = 0) -> np.ndarray:
        """The first ``n_batches`` whole batches of :meth:`eval_windows` (fewer when the split holds fewer), int32
        ``[n, batch, length]``. ``seed`` is accepted for the sources' common signature and unused: the split is
        fixed."""
        windows = self.eval_windows(length)
        n = min(n_batches, len(windows) // batch)
        if n == 0:
            raise ValueError(
                f"the held-out text holds {len(windows)} windows of {length} bytes: fewer than a batch"
            )
        return windows[: n * batch].reshape(n, batch, length)

    def loss_floor(self, seq_len: int) -> float:
        """Unknown for real text: NaN."""
        return math.nan


@functools.lru_cache(maxsize=2)
def _cached(directory: str | None) -> TextSource:
    data = corpus.load(None if directory is None else Path(directory))
    return TextSource(np.frombuffer(data, np.uint8))


def from_corpus(directory: Path | None = None) -> TextSource:
    """The pinned corpus as a source (read and checked once per process and folder)."""
    return _cached(None if directory is None else str(directory))
