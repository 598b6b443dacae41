"""Synthetic language: a seeded random Markov source with a known entropy rate.

The source is an order-``k`` Markov chain over ``V`` tokens.  A *context* is
the tuple of the last ``k`` tokens, encoded as the integer
``c = x[t-k] * V**(k-1) + ... + x[t-1]`` (most recent token least
significant).  Each context's next-token distribution is an independent draw
from a symmetric Dirichlet(``concentration``): low concentration gives peaked
rows, hence an entropy rate far below ``log V``, which a small model can learn.

For order >= 2, ``older_classes`` n lets the tokens before the last one enter
the next-token law only through their residue mod n: ``V**(k-1)`` older
contexts collapse to ``n**(k-1)``, each with its own Dirichlet rows.  The full
order-2 chain (n = V: 4,096 contexts for V = 64) is too much for the tiny model
at a benchmark's budget (it learns the bigram and nothing more); with n = 2 the
older token carries one bit, worth about 0.5 nats that a model learns
gradually — an excess loss over the floor that stays measurable at the budget
and that better training reduces, so variants can be told apart.

Because the exact entropy rate (and the exact optimal loss for finite
prefixes, :meth:`MarkovSource.loss_floor`) is known, a training run can report
how close it gets to the best achievable loss.

Streams are derived with :class:`numpy.random.SeedSequence` using distinct
``spawn_key`` tags, so the source's own randomness, each learner incarnation's
batches and the held-out evaluation set never share a stream.

Example:
    >>> src = MarkovSource.create(vocab_size=64, order=1, concentration=0.1, seed=0)
    >>> bool(src.entropy_rate() < np.log(64))
    True
    >>> next(learner_batches(src, seed=0, learner_id=0, incarnation=0, batch=16, seq_len=64)).shape
    (16, 65)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# spawn_key tags: a distinct first element gives each use its own independent stream.
_SOURCE_TAG = 0
_LEARNER_TAG = 1
_EVAL_TAG = 2

_STATIONARY_TOL = 1e-13
_STATIONARY_MAX_ITERS = 200_000


def _row_entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) along the last axis, with 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return terms.sum(axis=-1)


def _stationary(transition: np.ndarray, vocab_size: int, order: int) -> np.ndarray:
    """Stationary distribution over the ``V**order`` contexts.

    Power iteration on the *lazy* chain ``(I + M) / 2`` (same stationary
    distribution, but aperiodic, so the iteration converges even for a
    periodic ``M``).  One step of the context chain is a single einsum that
    never materialises the ``V**k x V**k`` matrix ``M``: context ``(a, s)``
    (oldest token ``a``, the ``k-1`` newer ones ``s``) moves to ``(s, c)``
    with probability ``P(c | a, s)``.
    """
    v, k = vocab_size, order
    n_ctx = v**k
    pi = np.full(n_ctx, 1.0 / n_ctx)
    # [a, s, c] view: a = oldest token, s = remaining k-1 tokens, c = next token.
    trans = transition.reshape(v, v ** (k - 1), v)
    for _ in range(_STATIONARY_MAX_ITERS):
        step = np.einsum("as,asc->sc", pi.reshape(v, v ** (k - 1)), trans).reshape(n_ctx)
        new = 0.5 * (pi + step)
        new /= new.sum()  # guard against drift from rounding
        if np.abs(new - pi).sum() < _STATIONARY_TOL:
            return new
        pi = new
    raise RuntimeError("stationary distribution did not converge; chain mixes too slowly")


# eq=False: the generated __eq__/__hash__ would compare/hash numpy arrays,
# which is ambiguous/unhashable; identity semantics are what callers need.
@dataclass(frozen=True, eq=False)
class MarkovSource:
    """An order-``k`` Markov chain over ``vocab_size`` tokens.

    Attributes:
        vocab_size: number of tokens ``V``.
        order: Markov order ``k`` (>= 1).
        transition: ``[V**k, V]`` row-stochastic float64; row ``c`` is
            ``P(next | context c)`` with the context encoding described in the
            module docstring.
        stationary: ``[V**k]`` stationary distribution over contexts.

    Example:
        >>> src = MarkovSource.create(8, order=2, seed=1)
        >>> src.transition.shape, src.stationary.shape
        ((64, 8), (64,))
    """

    vocab_size: int
    order: int
    transition: np.ndarray = field(repr=False)
    stationary: np.ndarray = field(repr=False)
    # Sampling caches, derived from the above in __post_init__.
    _offset_cdf: np.ndarray = field(init=False, repr=False)
    _u_min: float = field(init=False, repr=False)
    _stat_cdf: np.ndarray = field(init=False, repr=False)
    _place: np.ndarray = field(init=False, repr=False)

    @classmethod
    def create(
        cls,
        vocab_size: int,
        order: int = 1,
        concentration: float = 0.1,
        seed: int = 0,
        older_classes: int | None = None,
    ) -> MarkovSource:
        """Draw a random source; rows ~ Dirichlet(concentration * 1_V), one per context class (see the
        module docstring: ``older_classes`` None = every context its own row).

        Example:
            >>> bool(np.allclose(MarkovSource.create(16, seed=3).transition.sum(axis=1), 1.0))
            True
            >>> one_bit = MarkovSource.create(16, order=2, seed=3, older_classes=2)
            >>> bool(np.array_equal(one_bit.transition[0], one_bit.transition[2 * 16]))  # older 0 ~ older 2
            True
        """
        if vocab_size < 2 or order < 1 or concentration <= 0:
            raise ValueError("need vocab_size >= 2, order >= 1, concentration > 0")
        if older_classes is not None and not (order >= 2 and 2 <= older_classes <= vocab_size):
            raise ValueError(
                f"older_classes must be in [2, vocab_size] and needs order >= 2; got {older_classes} "
                f"with order {order}, vocab_size {vocab_size}"
            )
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_SOURCE_TAG,)))
        n_ctx = vocab_size**order
        if older_classes is None or older_classes == vocab_size:
            transition = rng.dirichlet(np.full(vocab_size, concentration), size=n_ctx)
        else:
            ctx = np.arange(n_ctx)
            cls_index = (
                ctx % vocab_size
            )  # the last token, then each older token's residue, oldest most significant
            place = vocab_size
            for j in range(1, order):
                older = (ctx // vocab_size**j) % vocab_size
                cls_index = cls_index + (older % older_classes) * place
                place *= older_classes
            rows = rng.dirichlet(np.full(vocab_size, concentration), size=place)
            transition = rows[cls_index]
        transition = transition / transition.sum(axis=1, keepdims=True)
        stationary = _stationary(transition, vocab_size, order)
        transition.setflags(write=False)
        stationary.setflags(write=False)
        return cls(vocab_size, order, transition, stationary)

    def __post_init__(self) -> None:
        n_ctx = self.vocab_size**self.order
        if self.transition.shape != (n_ctx, self.vocab_size) or self.stationary.shape != (n_ctx,):
            raise ValueError("transition must be [V**order, V] and stationary [V**order]")
        # Sampling uses per-row CDFs; cache them (frozen dataclass -> object.__setattr__).
        cdf = np.cumsum(self.transition, axis=1)
        cdf[:, -1] = 1.0  # so u in (0, 1] always lands on a valid token
        # Row c's CDF shifted by +c and flattened is globally non-decreasing, so
        # one searchsorted of (ctx + u) samples a whole batch of rows at once
        # (much faster than gathering [B, V] CDF rows each step).
        offset_cdf = (cdf + np.arange(n_ctx, dtype=np.float64)[:, None]).reshape(-1)
        object.__setattr__(self, "_offset_cdf", offset_cdf)
        object.__setattr__(self, "_u_min", 4.0 * float(np.spacing(float(n_ctx))))
        stat_cdf = np.cumsum(self.stationary)
        stat_cdf[-1] = 1.0
        object.__setattr__(self, "_stat_cdf", stat_cdf)
        # Place values of the context encoding, oldest token first.
        object.__setattr__(self, "_place", self.vocab_size ** np.arange(self.order - 1, -1, -1, dtype=np.int64))

    def entropy_rate(self) -> float:
        """Exact entropy rate in nats/token: ``sum_c pi(c) H(P(. | c))``.

        Example:
            >>> bool(0 < MarkovSource.create(64, seed=0).entropy_rate() < np.log(64))
            True
        """
        return float(self.stationary @ _row_entropy(self.transition))

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
        """Sample ``batch`` independent rows of ``length`` tokens, int32.

        The first ``order`` tokens of each row are a context drawn from the
        stationary distribution (so every position is stationary); later
        tokens follow the chain.  Vectorised over the batch; loops over time.
        Uses inverse-CDF sampling with ``u = 1 - rng.random()`` in ``(0, 1]``
        (searching for the first CDF entry ``>= u``) so a zero-probability
        token can never be chosen.

        Example:
            >>> src = MarkovSource.create(64, seed=0)
            >>> src.sample(np.random.default_rng(0), 16, 65).shape
            (16, 65)
        """
        v, k = self.vocab_size, self.order
        # Time-major buffers so each step reads/writes one contiguous row.
        out = np.empty((length, batch), dtype=np.int32)
        u = 1.0 - rng.random((length, batch))  # in (0, 1]
        # ctx + u must not round down to ctx (it would select the previous
        # context's row); flooring u at 4 ulp(V**k) prevents that and perturbs
        # probabilities by at most that much (~1e-12 for V**k = 4096).
        np.maximum(u, self._u_min, out=u)
        ctx = np.searchsorted(self._stat_cdf, u[0], side="left").astype(np.int64)
        # Decode the initial context into its k tokens (oldest first).
        first = (ctx[None, :] // self._place[:, None]) % v
        n0 = min(k, length)
        out[:n0] = first[:n0]
        mod = v ** (k - 1)  # dropping the oldest token of a context = ctx % V**(k-1)
        flat = self._offset_cdf
        for t in range(k, length):
            # First entry >= ctx + u in the shifted CDFs lies in row ctx.
            nxt = flat.searchsorted(ctx + u[t], side="left") - ctx * v
            out[t] = nxt
            ctx = nxt if k == 1 else (ctx % mod) * v + nxt
        return np.ascontiguousarray(out.T)

    def eval_rows(self, n_batches: int, batch: int, length: int, seed: int = 0) -> np.ndarray:
        """Held-out int32 ``[n_batches, batch, length]``: the first ``n_batches`` of a stream no learner uses (drawn
        batch by batch exactly like :func:`learner_batches`, under a key no learner can have)."""
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_EVAL_TAG,)))
        return np.stack([self.sample(rng, batch, length) for _ in range(n_batches)])

    def loss_floor(self, seq_len: int) -> float:
        """Exact expected optimal mean cross-entropy (nats/token) for a row.

        For a row of ``seq_len + 1`` tokens predicting tokens ``1..seq_len``
        each from its full prefix: position ``t >= order`` costs the entropy
        rate; position ``t < order`` sees only ``t`` tokens, costing
        ``H(X_t | X_0..X_{t-1})`` under the stationary context distribution.
        Equals :meth:`entropy_rate` for order 1.

        Example:
            >>> src = MarkovSource.create(16, order=2, seed=0)
            >>> src.loss_floor(64) > src.entropy_rate()
            True
        """
        if seq_len < 1:
            raise ValueError("seq_len must be >= 1")
        v, k = self.vocab_size, self.order
        joint = self.stationary.reshape((v,) * k)  # axes: oldest .. newest token
        # H(X_0..X_j) for j = 0..k-1 from marginals of the stationary context law.
        joint_h = []
        for j in range(k):
            marg = joint.sum(axis=tuple(range(j + 1, k))) if j + 1 < k else joint
            joint_h.append(float(_row_entropy(marg.reshape(-1))))
        rate = self.entropy_rate()
        total = 0.0
        for t in range(1, seq_len + 1):
            total += joint_h[t] - joint_h[t - 1] if t < k else rate
        return total / seq_len


class TokenSource(Protocol):
    """What training reads from a source of tokens: this module's :class:`MarkovSource` (a known floor, for unit
    tests and calibration) or real text (:class:`trainer.text_source.TextSource`)."""

    @property
    def vocab_size(self) -> int: ...

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray: ...

    def eval_rows(self, n_batches: int, batch: int, length: int, seed: int = 0) -> np.ndarray: ...

    def loss_floor(self, seq_len: int) -> float: ...


class LearnerBatches(Iterator[np.ndarray]):
    """Infinite stream of int32 ``[batch, seq_len + 1]`` training batches that knows where it is: ``stream`` (its
    key) and ``drawn`` (batches taken), what the data ledger logs (chaos.checkers.ledger)."""

    def __init__(
        self, source: TokenSource, seed: int, learner_id: int, incarnation: int, batch: int, seq_len: int
    ) -> None:
        self.source, self.batch, self.seq_len = source, batch, seq_len
        self.stream = [seed, learner_id, incarnation]
        self.rng = np.random.default_rng(
            np.random.SeedSequence(seed, spawn_key=(_LEARNER_TAG, learner_id, incarnation))
        )
        self.drawn = 0

    def __next__(self) -> np.ndarray:
        self.drawn += 1
        return self.source.sample(self.rng, self.batch, self.seq_len + 1)


def learner_batches(
    source: TokenSource, seed: int, learner_id: int, incarnation: int, batch: int, seq_len: int
) -> LearnerBatches:
    """Infinite stream of int32 ``[batch, seq_len + 1]`` training batches.

    Deterministic in ``(seed, learner_id, incarnation)``; distinct learners and
    incarnations (a restarted learner) get independent streams.

    Example:
        >>> src = MarkovSource.create(64, seed=0)
        >>> it = learner_batches(src, seed=0, learner_id=1, incarnation=0, batch=4, seq_len=8)
        >>> next(it).shape, it.stream, it.drawn
        ((4, 9), [0, 1, 0], 1)
    """
    return LearnerBatches(source, seed, learner_id, incarnation, batch, seq_len)


def eval_set(source: TokenSource, seed: int, n_batches: int, batch: int, seq_len: int) -> np.ndarray:
    """Held-out int32 ``[n, batch, seq_len + 1]`` (``n`` ≤ ``n_batches``: a real text's split may hold fewer).

    Example:
        >>> src = MarkovSource.create(64, seed=0)
        >>> eval_set(src, seed=0, n_batches=2, batch=4, seq_len=8).shape
        (2, 4, 9)
    """
    return source.eval_rows(n_batches, batch, seq_len + 1, seed=seed)
