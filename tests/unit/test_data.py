"""Unit tests for trainer.data (seeded Markov source with a known entropy rate).

Statistical checks use fixed seeds (so they are deterministic) and tolerances
of ~5 standard errors (so they would still pass for almost any seed).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.data import MarkovSource, _row_entropy, _stationary, eval_set, learner_batches


@pytest.fixture(scope="module")
def src1() -> MarkovSource:
    return MarkovSource.create(64, order=1, concentration=0.1, seed=0)


@pytest.fixture(scope="module")
def src2() -> MarkovSource:
    # 16**2 = 256 contexts: small enough for per-context statistics.
    return MarkovSource.create(16, order=2, concentration=0.1, seed=0)


def _contexts(source: MarkovSource, rows: np.ndarray) -> np.ndarray:
    """Context index preceding each position k..L-1 of every row."""
    k, v = source.order, source.vocab_size
    n = rows.shape[1] - k
    ctx = np.zeros((rows.shape[0], n), dtype=np.int64)
    for i in range(k):
        ctx = ctx * v + rows[:, i : i + n]
    return ctx


def _nll(source: MarkovSource, rows: np.ndarray) -> np.ndarray:
    """-log P(x_t | context) for t >= order, shape [rows, L - order]."""
    ctx = _contexts(source, rows)
    return -np.log(source.transition[ctx, rows[:, source.order :]])


def test_create_is_deterministic_and_seed_dependent(src1: MarkovSource) -> None:
    again = MarkovSource.create(64, order=1, concentration=0.1, seed=0)
    np.testing.assert_array_equal(again.transition, src1.transition)
    np.testing.assert_array_equal(again.stationary, src1.stationary)
    other = MarkovSource.create(64, order=1, concentration=0.1, seed=1)
    assert not np.allclose(other.transition, src1.transition)


@pytest.mark.parametrize("which", ["src1", "src2"])
def test_shapes_stochastic_and_stationary(which: str, request: pytest.FixtureRequest) -> None:
    src: MarkovSource = request.getfixturevalue(which)
    v, k = src.vocab_size, src.order
    assert src.transition.shape == (v**k, v)
    assert src.stationary.shape == (v**k,)
    assert np.all(src.transition >= 0)
    np.testing.assert_allclose(src.transition.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(src.stationary >= 0)
    assert abs(src.stationary.sum() - 1.0) < 1e-12
    # Invariance: one step of the context chain leaves pi unchanged.
    pi = src.stationary.reshape(v, v ** (k - 1))
    stepped = np.einsum("as,asc->sc", pi, src.transition.reshape(v, v ** (k - 1), v)).reshape(-1)
    np.testing.assert_allclose(stepped, src.stationary, atol=1e-12)


def test_order1_stationary_is_left_eigenvector(src1: MarkovSource) -> None:
    np.testing.assert_allclose(src1.stationary @ src1.transition, src1.stationary, atol=1e-12)


def test_order2_stationary_marginals_agree(src2: MarkovSource) -> None:
    # A stationary pair law has equal first- and second-token marginals.
    joint = src2.stationary.reshape(16, 16)
    np.testing.assert_allclose(joint.sum(axis=1), joint.sum(axis=0), atol=1e-12)


def test_stationary_of_periodic_chain() -> None:
    # Period 2 (0 -> {1, 2} -> 0): plain power iteration from uniform would
    # oscillate forever; the stationary law is (1/2, 1/4, 1/4).
    periodic = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(_stationary(periodic, 3, 1), [0.5, 0.25, 0.25], atol=1e-12)


def test_entropy_rate_learnable_but_nontrivial(src1: MarkovSource) -> None:
    h = src1.entropy_rate()
    assert 0.5 < h < math.log(64) - 1.0


def test_concentration_controls_entropy() -> None:
    rates = [MarkovSource.create(64, 1, c, seed=0).entropy_rate() for c in (0.03, 0.1, 1.0)]
    assert rates[0] < rates[1] < rates[2] < math.log(64)


def test_create_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        MarkovSource.create(64, order=0)
    with pytest.raises(ValueError):
        MarkovSource.create(64, concentration=0.0)


def test_older_classes_of_vocab_size_is_the_full_chain_and_bad_values_are_refused() -> None:
    plain = MarkovSource.create(16, order=2, seed=0)
    np.testing.assert_array_equal(
        MarkovSource.create(16, order=2, seed=0, older_classes=16).transition, plain.transition
    )
    for bad in (1, 17):
        with pytest.raises(ValueError, match="older_classes"):
            MarkovSource.create(16, order=2, older_classes=bad)
    with pytest.raises(ValueError, match="order 1"):
        MarkovSource.create(16, order=1, older_classes=2)


def _last_token_model_gap(src: MarkovSource) -> float:
    """Excess over the entropy rate of the best predictor that sees only the last token."""
    v = src.vocab_size
    joint = src.stationary.reshape(v, v)  # [older, last]
    last = joint.sum(axis=0)
    rows = np.einsum("ab,abc->bc", joint, src.transition.reshape(v, v, v)) / last[:, None]
    return float(last @ _row_entropy(rows)) - src.entropy_rate()


def test_older_classes_leave_a_measured_amount_of_structure_beyond_the_last_token() -> None:
    src = MarkovSource.create(64, order=2, seed=0, older_classes=2)
    t = src.transition.reshape(64, 64, 64)  # [older, last, next]
    np.testing.assert_array_equal(t[0], t[62])  # same parity of the older token: the same law
    assert not np.array_equal(t[0], t[1])
    # One bit of the older token is worth up to ln 2: what a model must still learn after the bigram.
    assert 0.2 < _last_token_model_gap(src) < math.log(2)
    assert _last_token_model_gap(src) < _last_token_model_gap(
        MarkovSource.create(64, order=2, seed=0, older_classes=4)
    )


def test_sample_shape_dtype_range_and_rng_determinism(src1: MarkovSource) -> None:
    a = src1.sample(np.random.default_rng(7), 16, 65)
    b = src1.sample(np.random.default_rng(7), 16, 65)
    assert a.shape == (16, 65) and a.dtype == np.int32
    assert a.min() >= 0 and a.max() < 64
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, src1.sample(np.random.default_rng(8), 16, 65))


def test_sample_follows_deterministic_cycle_exactly() -> None:
    # Zero-probability transitions must never be sampled.
    cycle = np.roll(np.eye(4), 1, axis=1)  # i -> i+1 mod 4 with probability 1
    src = MarkovSource(vocab_size=4, order=1, transition=cycle, stationary=np.full(4, 0.25))
    rows = src.sample(np.random.default_rng(0), 500, 20)
    np.testing.assert_array_equal(rows[:, 1:], (rows[:, :-1] + 1) % 4)
    assert set(np.unique(rows[:, 0])) == {0, 1, 2, 3}


@pytest.mark.parametrize("which", ["src1", "src2"])
def test_rows_start_from_stationary(which: str, request: pytest.FixtureRequest) -> None:
    src: MarkovSource = request.getfixturevalue(which)
    n = 40_000
    rows = src.sample(np.random.default_rng(1), n, src.order + 1)
    ctx = _contexts(src, rows)[:, 0]  # the initial context of each row
    freq = np.bincount(ctx, minlength=src.stationary.size) / n
    p = src.stationary
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 2e-4)


@pytest.mark.parametrize("which", ["src1", "src2"])
def test_empirical_transitions_match(which: str, request: pytest.FixtureRequest) -> None:
    src: MarkovSource = request.getfixturevalue(which)
    rows = src.sample(np.random.default_rng(2), 2000, 201)
    ctx = _contexts(src, rows).reshape(-1)
    nxt = rows[:, src.order :].reshape(-1)
    counts = np.zeros_like(src.transition)
    np.add.at(counts, (ctx, nxt), 1.0)
    n = counts.sum(axis=1)
    well_sampled = n >= 500
    assert well_sampled.sum() >= 20
    observed = counts[well_sampled]
    expected = n[well_sampled, None] * src.transition[well_sampled]
    # 5 binomial sigmas, plus a few counts of slack for the Poisson tail of
    # very rare transitions (p ~ 1e-6 seen once is not an error).
    tol = 5 * np.sqrt(expected * (1 - src.transition[well_sampled])) + 3
    assert np.all(np.abs(observed - expected) <= tol)


@pytest.mark.parametrize("which", ["src1", "src2"])
def test_entropy_rate_matches_monte_carlo(which: str, request: pytest.FixtureRequest) -> None:
    src: MarkovSource = request.getfixturevalue(which)
    rows = src.sample(np.random.default_rng(3), 4000, 101)
    per_row = _nll(src, rows).mean(axis=1)  # rows are independent
    se = per_row.std() / math.sqrt(len(per_row))
    assert abs(per_row.mean() - src.entropy_rate()) < 5 * se


def test_loss_floor_order1_equals_entropy_rate(src1: MarkovSource) -> None:
    for seq_len in (1, 16, 64):
        assert abs(src1.loss_floor(seq_len) - src1.entropy_rate()) < 1e-12


def test_loss_floor_order2_exceeds_rate_and_matches_monte_carlo(src2: MarkovSource) -> None:
    seq_len = 16
    floor = src2.loss_floor(seq_len)
    assert floor > src2.entropy_rate() + 1e-3
    # Longer rows dilute the under-informed first prediction.
    assert src2.loss_floor(1) > src2.loss_floor(4) > floor > src2.loss_floor(256)
    # Monte-Carlo of the optimal predictor: position 1 uses P(x1 | x0) from the
    # stationary pair law, positions >= 2 the true transition.
    rows = src2.sample(np.random.default_rng(4), 20_000, seq_len + 1)
    joint = src2.stationary.reshape(16, 16)
    cond = joint / joint.sum(axis=1, keepdims=True)
    first = -np.log(cond[rows[:, 0], rows[:, 1]])
    per_row = (first + _nll(src2, rows).sum(axis=1)) / seq_len
    se = per_row.std() / math.sqrt(len(per_row))
    assert abs(per_row.mean() - floor) < 5 * se


def test_learner_batches_shape_and_determinism(src1: MarkovSource) -> None:
    def take(it, n):  # noqa: ANN001, ANN202 - tiny local helper
        return [next(it) for _ in range(n)]

    a = take(learner_batches(src1, seed=5, learner_id=2, incarnation=1, batch=16, seq_len=64), 3)
    b = take(learner_batches(src1, seed=5, learner_id=2, incarnation=1, batch=16, seq_len=64), 3)
    for x, y in zip(a, b, strict=True):
        assert x.shape == (16, 65) and x.dtype == np.int32
        assert x.min() >= 0 and x.max() < 64
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1])  # the stream advances


def test_learner_streams_are_independent(src1: MarkovSource) -> None:
    def stream(seed: int, learner: int, inc: int) -> np.ndarray:
        it = learner_batches(src1, seed=seed, learner_id=learner, incarnation=inc, batch=16, seq_len=64)
        return np.concatenate([next(it) for _ in range(100)])

    base = stream(0, 0, 0)
    others = [stream(0, 1, 0), stream(0, 0, 1), stream(1, 0, 0)]
    # Independent stationary tokens agree with probability sum_v pi(v)^2.
    collide = float(np.sum(src1.stationary**2))
    for other in others:
        assert not np.array_equal(base, other)
        agree = (base == other).mean(axis=1)  # per row; rows are independent
        se = agree.std() / math.sqrt(len(agree))
        assert abs(agree.mean() - collide) < 5 * se + 1e-3


def test_eval_set_shape_determinism_and_held_out(src1: MarkovSource) -> None:
    ev = eval_set(src1, seed=0, n_batches=3, batch=16, seq_len=64)
    assert ev.shape == (3, 16, 65) and ev.dtype == np.int32
    np.testing.assert_array_equal(ev, eval_set(src1, seed=0, n_batches=3, batch=16, seq_len=64))
    assert not np.array_equal(ev, eval_set(src1, seed=1, n_batches=3, batch=16, seq_len=64))
    eval_rows = {row.tobytes() for row in ev.reshape(-1, 65)}
    for learner in range(4):
        for inc in range(2):
            it = learner_batches(src1, seed=0, learner_id=learner, incarnation=inc, batch=16, seq_len=64)
            for _ in range(3):
                assert not eval_rows & {row.tobytes() for row in next(it)}
