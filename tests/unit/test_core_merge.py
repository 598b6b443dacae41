"""Unit tests for trainer.core.merge (token weights, weighted mean, RDA)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.merge import (
    MERGE_RULES,
    fragment_norm,
    merge_outer_gradients,
    outer_gradient,
    rda,
    token_weight,
    weighted_mean,
)

SETTINGS = settings(max_examples=60, deadline=None)


# ---- token weights ------------------------------------------------------
@pytest.mark.parametrize(
    "tokens,steps,expected",
    [(64, 1, 4096.0), (64, 2, 2048.0), (100, 4, 2500.0), (1, 1, 1.0), (0, 5, 0.0), (10, 0, 0.0), (0, 0, 0.0)],
)
def test_token_weight(tokens, steps, expected):
    assert token_weight(tokens, steps) == expected


@SETTINGS
@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=1, max_value=10**4))
def test_token_weight_is_tokens_squared_over_steps(tokens, steps):
    assert token_weight(tokens, steps) == pytest.approx(tokens**2 / steps, rel=1e-12)


# ---- weighted mean --------------------------------------------------------
def test_weighted_mean_matches_hand_computation():
    v1 = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([[4.0]], np.float32)}
    v2 = {"a": np.array([3.0, -2.0], np.float32), "b": np.array([[0.0]], np.float32)}
    out = merge_outer_gradients([v1, v2], [3.0, 1.0], "mean")
    # (3 * v1 + 1 * v2) / 4
    np.testing.assert_allclose(out["a"], [1.5, 1.0], rtol=1e-6)
    np.testing.assert_allclose(out["b"], [[3.0]], rtol=1e-6)
    assert out["a"].dtype == np.float32 and out["b"].shape == (1, 1)


@SETTINGS
@given(
    st.lists(st.floats(min_value=-100, max_value=100), min_size=1, max_size=6),
    st.data(),
)
def test_weighted_mean_lies_between_min_and_max(values, data):
    weights = data.draw(
        st.lists(st.floats(min_value=0.01, max_value=100), min_size=len(values), max_size=len(values))
    )
    vectors = [{"x": np.array([v], np.float64)} for v in values]
    out = weighted_mean(vectors, weights)["x"][0]
    assert min(values) - 1e-9 <= out <= max(values) + 1e-9


def test_all_zero_weights_fall_back_to_equal_weights():
    v1 = {"w": np.array([2.0, 0.0])}
    v2 = {"w": np.array([0.0, 4.0])}
    for rule in MERGE_RULES:
        zero = merge_outer_gradients([v1, v2], [0.0, 0.0], rule)
        equal = merge_outer_gradients([v1, v2], [1.0, 1.0], rule)
        np.testing.assert_allclose(zero["w"], equal["w"])
    np.testing.assert_allclose(merge_outer_gradients([v1, v2], [0.0, 0.0], "mean")["w"], [1.0, 2.0])


def test_zero_weight_contribution_is_ignored_when_others_have_weight():
    v1 = {"w": np.array([2.0, 0.0])}
    v2 = {"w": np.array([0.0, 4.0])}
    for rule in MERGE_RULES:
        np.testing.assert_allclose(merge_outer_gradients([v1, v2], [5.0, 0.0], rule)["w"], v1["w"])


# ---- RDA ------------------------------------------------------------------
@pytest.mark.parametrize("m", [4, 16, 64])
def test_rda_keeps_the_norm_of_nearly_orthogonal_vectors(m):
    rng = np.random.default_rng(m)
    r = 2.5
    dim = 20_000
    vectors = []
    for _ in range(m):
        v = rng.standard_normal(dim)
        vectors.append({"w": v * (r / np.linalg.norm(v))})
    weights = [1.0] * m
    out = merge_outer_gradients(vectors, weights, "rda")
    mean = merge_outer_gradients(vectors, weights, "mean")
    assert fragment_norm(out) == pytest.approx(r, abs=1e-5)
    assert fragment_norm(mean) == pytest.approx(r / math.sqrt(m), rel=0.1)
    # RDA points where the mean points.
    cos = float(np.dot(out["w"], mean["w"]) / (np.linalg.norm(out["w"]) * np.linalg.norm(mean["w"])))
    assert cos == pytest.approx(1.0, abs=1e-9)


@SETTINGS
@given(
    st.lists(st.floats(min_value=-10, max_value=10, allow_subnormal=False), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=6),
    st.lists(st.floats(min_value=0.1, max_value=10), min_size=6, max_size=6),
)
def test_rda_of_identical_vectors_is_that_vector(values, m, weights):
    v = {"w": np.array(values, np.float64), "b": np.array([1.0, -1.0])}
    out = rda([v] * m, weights[:m])
    for n in v:
        np.testing.assert_allclose(out[n], v[n], rtol=1e-9, atol=1e-12)


def test_rda_zero_vector_adds_no_direction_but_counts_in_the_radius():
    v = {"w": np.array([3.0, 4.0])}
    zero = {"w": np.zeros(2)}
    out = rda([v, zero], [1.0, 1.0])
    # radius = (5 + 0) / 2, direction = unit(v): the result is v / 2.
    np.testing.assert_allclose(out["w"], [1.5, 2.0], rtol=1e-12)
    assert np.all(np.isfinite(out["w"]))


def test_rda_of_only_zero_vectors_is_zero():
    zeros = [{"w": np.zeros(3, np.float32)}] * 3
    out = rda(zeros, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(out["w"], np.zeros(3, np.float32))


def test_rda_of_opposite_vectors_is_zero():
    v = {"w": np.array([1.0, 2.0])}
    out = rda([v, {"w": -v["w"]}], [1.0, 1.0])
    np.testing.assert_array_equal(out["w"], [0.0, 0.0])


def test_rda_radius_is_the_weighted_mean_norm():
    v1 = {"w": np.array([2.0, 0.0])}
    v2 = {"w": np.array([0.0, 6.0])}
    out = rda([v1, v2], [3.0, 1.0])
    radius = (3 * 2.0 + 1 * 6.0) / 4
    direction = np.array([3 * 1.0, 1 * 1.0]) / 4
    expected = radius * direction / np.linalg.norm(direction)
    np.testing.assert_allclose(out["w"], expected, rtol=1e-12)


def test_norms_are_over_the_whole_fragment():
    assert fragment_norm({"a": np.array([3.0]), "b": np.array([[4.0]])}) == pytest.approx(5.0)
    # v1 lives only in "a", v2 only in "b"; each has fragment norm 1.
    v1 = {"a": np.array([1.0, 0.0]), "b": np.array([0.0])}
    v2 = {"a": np.array([0.0, 0.0]), "b": np.array([1.0])}
    out = rda([v1, v2], [1.0, 1.0])
    s = 1 / math.sqrt(2)
    # Whole-fragment RDA: radius 1, direction (1, 0, 1)/sqrt(2). A per-tensor RDA would give 0.5 / 0.5.
    np.testing.assert_allclose(out["a"], [s, 0.0], rtol=1e-12)
    np.testing.assert_allclose(out["b"], [s], rtol=1e-12)
    assert fragment_norm(out) == pytest.approx(1.0)


def test_rda_preserves_dtype_and_shape():
    rng = np.random.default_rng(0)
    vs = [{"w": rng.standard_normal((3, 2)).astype(np.float32)} for _ in range(3)]
    out = rda(vs, [1.0, 2.0, 3.0])
    assert out["w"].dtype == np.float32 and out["w"].shape == (3, 2)


def test_docstring_example():
    v1, v2 = {"w": np.array([1.0, 0.0])}, {"w": np.array([0.0, 1.0])}
    assert merge_outer_gradients([v1, v2], [1.0, 1.0], "mean")["w"].tolist() == [0.5, 0.5]
    assert fragment_norm(merge_outer_gradients([v1, v2], [1.0, 1.0], "rda")) == pytest.approx(1.0)


# ---- errors ---------------------------------------------------------------
def test_unknown_rule_raises():
    with pytest.raises(ValueError, match="unknown merge rule 'median'"):
        merge_outer_gradients([{"w": np.ones(2)}], [1.0], "median")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "vectors,weights", [([], []), ([{"w": np.ones(1)}], [1.0, 1.0]), ([{"w": np.ones(1)}] * 2, [1.0])]
)
def test_mismatched_or_empty_inputs_raise(vectors, weights):
    with pytest.raises(ValueError):
        merge_outer_gradients(vectors, weights, "mean")


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_negative_or_non_finite_weights_raise(bad):
    with pytest.raises(ValueError, match="weights"):
        merge_outer_gradients([{"w": np.ones(1)}] * 2, [1.0, bad], "mean")


def test_outer_gradient_is_global_minus_local():
    out = outer_gradient({"w": np.array([1.0, 5.0])}, {"w": np.array([0.5, 7.0])})
    np.testing.assert_allclose(out["w"], [0.5, -2.0])


def test_rda_with_a_huge_zero_weight_contribution_stays_finite():
    """float32 norms overflowed at 1.8e19 and 0·inf made the whole merge NaN (found by the state-machine test)."""
    good = {"w": np.array([1.0, 0.0], np.float32)}
    huge = {"w": np.full(2, 1e20, np.float32)}
    out = merge_outer_gradients([good, huge], [1.0, 0.0], "rda")
    assert np.all(np.isfinite(out["w"]))
    np.testing.assert_allclose(out["w"], good["w"], rtol=1e-6)
