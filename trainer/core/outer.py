"""The syncer's optimizer: SGD with Nesterov momentum on merged outer gradients (optax).

One optimizer state per fragment: fragments merge independently. In data-parallel mode the
merged vector is the learners' mean *gradient* and the syncer's optimizer is the inner one,
AdamW (:func:`adamw`, the learners' optimizer too), its learning rate scaled by the run's token
progress (:func:`progress_scale`): one AdamW update applied once, for every learner.

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
import math
from dataclasses import dataclass
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


@dataclass(frozen=True)
class AdamWSpec:
    """AdamW after global-norm clipping, lr warmed up linearly over the first steps, then decayed by token
    progress (``decay`` cosine to ``final_lr_fraction``, or constant)."""

    lr: float
    b1: float = 0.9
    b2: float = 0.95
    weight_decay: float = 0.1
    warmup_steps: int = 0
    grad_clip: float = 1.0
    decay: str = "cosine"
    final_lr_fraction: float = 0.1


@functools.lru_cache(maxsize=64)
def adamw(spec: AdamWSpec) -> optax.GradientTransformation:
    """Clipping, then AdamW with the warmup; the decay is :func:`progress_scale`, applied by the caller.

    The decay is not in here: under faults no learner knows how many steps it will take, so whoever
    steps scales the update by the run's *global* token progress (AdamW's update, weight decay included,
    is linear in lr: scaling it is AdamW at lr × scale).
    """
    sched = optax.linear_schedule(0.0, spec.lr, max(spec.warmup_steps, 1)) if spec.warmup_steps else spec.lr
    return optax.chain(
        optax.clip_by_global_norm(spec.grad_clip),
        optax.adamw(sched, b1=spec.b1, b2=spec.b2, weight_decay=spec.weight_decay),
    )


def progress_scale(spec: AdamWSpec, progress: float) -> float:
    """Multiplier of the learning rate at global ``progress`` (tokens trained / budget).

    >>> [round(progress_scale(AdamWSpec(lr=1e-3, final_lr_fraction=0.1), p), 3) for p in (0.0, 0.5, 1.0, 2.0)]
    [1.0, 0.55, 0.1, 0.1]
    >>> progress_scale(AdamWSpec(lr=1e-3, decay="constant"), 0.9)
    1.0
    """
    if spec.decay == "constant":
        return 1.0
    p = min(max(progress, 0.0), 1.0)
    f = spec.final_lr_fraction
    return f + (1 - f) * 0.5 * (1 + math.cos(math.pi * p))


_JITTED: dict[int, tuple[optax.GradientTransformation, Any]] = {}


def _compiled(opt: optax.GradientTransformation) -> Any:
    """One jitted update + apply per optimizer: a merge costs one dispatch instead of dozens of small ops."""
    if id(opt) not in _JITTED:

        def step(state: Any, params: Tensors, grad: Tensors, scale: Any) -> tuple[Any, Any]:
            updates, new_state = opt.update(grad, state, params)
            updates = jax.tree_util.tree_map(lambda u: u * scale, updates)
            return optax.apply_updates(params, updates), new_state

        _JITTED[id(opt)] = (opt, jax.jit(step))  # holding opt keeps its id unique
    return _JITTED[id(opt)][1]


def outer_step(
    opt: optax.GradientTransformation, state: Any, params: Tensors, outer_grad: Tensors, scale: float = 1.0
) -> tuple[Tensors, Any]:
    """Apply one step, its update scaled by ``scale`` (:func:`progress_scale`; 1 for the Nesterov outer step);
    returns numpy float arrays of the same dtype and the new state."""
    new_params, new_state = _compiled(opt)(state, params, outer_grad, np.float32(scale))
    return {n: np.asarray(v, dtype=params[n].dtype) for n, v in new_params.items()}, new_state
