"""The outer optimizer: SGD with Nesterov momentum on merged outer gradients (optax).

One optimizer state per fragment: fragments merge independently.

Example:
    >>> import numpy as np
    >>> opt = outer_optimizer(lr=0.7, momentum=0.9, nesterov=True)
    >>> theta = {"w": np.array([1.0], dtype=np.float32)}
    >>> state = opt.init(theta)
    >>> theta, state = outer_step(opt, state, theta, {"w": np.array([0.5], dtype=np.float32)})
    >>> round(float(theta["w"][0]), 4)   # 1 - 0.7 * (0.5 + 0.9 * 0.5)
    0.335
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import optax

Tensors = dict[str, np.ndarray]


@functools.lru_cache(maxsize=64)
def outer_optimizer(lr: float, momentum: float, nesterov: bool) -> optax.GradientTransformation:
    """optax SGD; momentum 0 gives plain SGD (no trace state). The same settings give the same object."""
    if lr <= 0:
        raise ValueError(f"outer lr must be > 0, got {lr}")
    if not 0 <= momentum < 1:
        raise ValueError(f"outer momentum must be in [0, 1), got {momentum}")
    if momentum == 0:
        return optax.sgd(lr)
    return optax.sgd(lr, momentum=momentum, nesterov=nesterov)


_JITTED: dict[int, tuple[optax.GradientTransformation, Any]] = {}


def _compiled(opt: optax.GradientTransformation) -> Any:
    """One jitted update + apply per optimizer: a merge costs one dispatch instead of dozens of small ops."""
    if id(opt) not in _JITTED:
        def step(state: Any, params: Tensors, grad: Tensors) -> tuple[Any, Any]:
            updates, new_state = opt.update(grad, state, params)
            return optax.apply_updates(params, updates), new_state
        _JITTED[id(opt)] = (opt, jax.jit(step))  # holding opt keeps its id unique
    return _JITTED[id(opt)][1]


def outer_step(
    opt: optax.GradientTransformation, state: Any, params: Tensors, outer_grad: Tensors
) -> tuple[Tensors, Any]:
    """Apply one outer step; returns numpy float arrays of the same dtype and the new state."""
    new_params, new_state = _compiled(opt)(state, params, outer_grad)
    return {n: np.asarray(v, dtype=params[n].dtype) for n, v in new_params.items()}, new_state
