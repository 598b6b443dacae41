"""Unit tests for trainer.core.outer (the outer Nesterov SGD optimizer)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.outer import outer_optimizer, outer_step

SETTINGS = settings(max_examples=50, deadline=None)


def _run(opt, theta, grads):
    state = opt.init(theta)
    history = []
    for g in grads:
        theta, state = outer_step(opt, state, theta, g)
        history.append({n: v.copy() for n, v in theta.items()})
    return history


def test_nesterov_matches_hand_computation_over_three_steps():
    lr, mu = 0.7, 0.9
    theta0 = np.array([1.0, -2.0, 0.5], np.float64)
    grads = [np.array([0.5, 1.0, -1.0]), np.array([-0.25, 0.5, 2.0]), np.array([1.5, -0.75, 0.0])]
    history = _run(outer_optimizer(lr, mu, nesterov=True), {"w": theta0.copy()}, [{"w": g} for g in grads])

    theta, trace = theta0.copy(), np.zeros(3)
    for g, got in zip(grads, history):
        trace = g + mu * trace
        update = g + mu * trace
        theta = theta - lr * update
        np.testing.assert_allclose(got["w"], theta, rtol=1e-5, atol=1e-7)


def test_heavy_ball_without_nesterov_matches_hand_computation():
    lr, mu = 0.5, 0.5
    grads = [np.array([1.0]), np.array([2.0]), np.array([-1.0])]
    history = _run(outer_optimizer(lr, mu, nesterov=False), {"w": np.zeros(1)}, [{"w": g} for g in grads])
    theta, trace = np.zeros(1), np.zeros(1)
    for g, got in zip(grads, history):
        trace = g + mu * trace
        theta = theta - lr * trace
        np.testing.assert_allclose(got["w"], theta, rtol=1e-5)


@SETTINGS
@given(
    st.floats(min_value=1e-3, max_value=2.0),
    st.lists(st.floats(min_value=-10, max_value=10), min_size=1, max_size=4),
    st.booleans(),
)
def test_momentum_zero_is_plain_sgd(lr, gs, nesterov):
    theta0 = np.array([0.25, -1.0], np.float64)
    grads = [np.array([g, -g]) for g in gs]
    history = _run(outer_optimizer(lr, 0.0, nesterov), {"w": theta0.copy()}, [{"w": g} for g in grads])
    theta = theta0.copy()
    for g, got in zip(grads, history):
        theta = theta - lr * g
        # The outer step computes in float32 (one fused, jitted update): allow float32 rounding near zero.
        np.testing.assert_allclose(got["w"], theta, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(
    st.lists(st.floats(min_value=-100, max_value=100, width=32), min_size=1, max_size=5),
    st.lists(st.floats(min_value=-100, max_value=100, width=32), min_size=5, max_size=5),
)
def test_lr_one_momentum_zero_with_grad_theta_minus_x_gives_x(theta_vals, x_vals):
    theta = {"w": np.array(theta_vals, np.float32)}
    x = {"w": np.array(x_vals[: len(theta_vals)], np.float32)}
    opt = outer_optimizer(1.0, 0.0, nesterov=True)
    new, _ = outer_step(opt, opt.init(theta), theta, {"w": theta["w"] - x["w"]})
    np.testing.assert_allclose(new["w"], x["w"], rtol=1e-5, atol=1e-4)


def test_outer_step_returns_numpy_arrays_of_the_same_dtype():
    theta = {"a": np.ones(3, np.float32), "b": np.ones((2, 2), np.float32)}
    opt = outer_optimizer(0.7, 0.9, nesterov=True)
    new, state = outer_step(opt, opt.init(theta), theta, {n: np.full_like(v, 0.5) for n, v in theta.items()})
    for n in theta:
        assert isinstance(new[n], np.ndarray)
        assert new[n].dtype == np.float32 and new[n].shape == theta[n].shape
    # Docstring value: 1 - 0.7 * (0.5 + 0.9 * 0.5)
    np.testing.assert_allclose(new["a"], np.full(3, 0.335), rtol=1e-5)
    np.testing.assert_allclose(theta["a"], np.ones(3))  # the input is not mutated


@pytest.mark.parametrize("lr", [0.0, -0.1])
def test_non_positive_lr_raises(lr):
    with pytest.raises(ValueError, match="outer lr"):
        outer_optimizer(lr, 0.9, nesterov=True)


@pytest.mark.parametrize("mu", [-0.1, 1.0, 1.5])
def test_momentum_out_of_range_raises(mu):
    with pytest.raises(ValueError, match="momentum"):
        outer_optimizer(0.7, mu, nesterov=True)
