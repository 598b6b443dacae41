"""The surrogate training problem the simulator's learners optimise.

Real JAX training is too slow for hundreds of generated schedules, and the
properties under test (versions, quorum, merging, reintegration) do not depend
on what is learned. So each learner runs SGD on a noisy quadratic whose
minimum differs a little per learner (heterogeneous data), over a compact
stand-in of the real model's tensors: the same tensor names, so the same
fragments and merge rules (mean for the embedding, RDA elsewhere), but
``dims`` numbers per tensor. Message sizes still come from the real tensor
shapes, so bandwidth faults cost what they would cost.

Loss is ``floor + 0.5·mean(a ⊙ (θ − c)²)`` with per-coordinate curvature ``a``
(log-uniform, so some directions take the whole run to converge: lost steps
show up in the final loss, as they do in real training).

Example:
    >>> p = QuadraticProblem.create({"embed": (4, 4), "w": (8,)}, seed=0)
    >>> params = p.init_params()
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> before = p.loss(params)
    >>> for _ in range(200):
    ...     params = p.sgd_step(params, learner=0, lr=0.2, rng=rng)
    >>> bool(p.loss(params) < before)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from trainer.core import wire_formats

Tensors = dict[str, np.ndarray]
MAX_CURVATURE = 1.0  # the largest per-coordinate curvature: an SGD step moves θ by at most lr·(|θ − c| + noise)


@dataclass(frozen=True)
class QuadraticProblem:
    shapes: dict[str, tuple[int, ...]]  # the real model's tensors (names and byte sizes)
    curvature: Tensors
    center: Tensors
    offsets: tuple[Tensors, ...]  # per learner index: its optimum's shift (data heterogeneity)
    noise: float
    floor: float
    dims: int
    _stacks: dict[tuple[tuple[str, ...], int], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    _sizes: dict[str, int] = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def create(
        cls,
        shapes: Mapping[str, tuple[int, ...]],
        seed: int,
        *,
        dims: int = 16,
        learners: int = 16,
        heterogeneity: float = 0.3,
        noise: float = 0.5,
        floor: float = 2.0,
    ) -> QuadraticProblem:
        rng = np.random.default_rng([seed, 0x51])
        names = sorted(shapes)
        curvature = {
            n: np.exp(rng.uniform(np.log(1e-3), np.log(MAX_CURVATURE), dims)).astype(np.float32) for n in names
        }
        center = {n: rng.normal(0.0, 3.0, dims).astype(np.float32) for n in names}
        offsets = tuple(
            {n: (heterogeneity * rng.normal(0.0, 1.0, dims)).astype(np.float32) for n in names}
            for _ in range(learners)
        )
        return cls(dict(shapes), curvature, center, offsets, noise, floor, dims)

    def coordinate_step_bound(self) -> float:
        """The most one SGD step moves a coordinate, in units of lr, beside ``MAX_CURVATURE·|θ|``: the gradient
        ``a⊙(θ − c − offset) + noise`` with ``a ≤ 1``, so ``max|c| + max|offset|`` + six standard deviations of
        noise (the syncer's per-coordinate bound, trainer.core.upload_checks.check_coordinates)."""
        centre = max(float(np.abs(c).max()) for c in self.center.values())
        offset = max(float(np.abs(o).max()) for off in self.offsets for o in off.values())
        return centre + offset + 6 * self.noise

    def init_params(self) -> Tensors:
        return {n: np.zeros(self.dims, np.float32) for n in sorted(self.shapes)}

    def real_bytes(self, names: list[str] | tuple[str, ...], wire_format: str = "float32") -> int:
        """Bytes these tensors would have on the wire in the real system, in ``wire_format`` (fetches: float32)."""
        if not self._sizes:  # asked at every upload and fetch: counted once
            self._sizes.update(self.real_sizes())
        return sum(wire_formats.nbytes(wire_format, self._sizes[n]) for n in names)

    def real_sizes(self) -> dict[str, int]:
        return {n: int(np.prod(s)) for n, s in self.shapes.items()}

    def _stacked(self, names: tuple[str, ...], learner: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Curvature, center and learner ``learner``'s offset as (tensors × dims) arrays in ``names``' order, made
        once: a step is then three array operations, not three per tensor (the simulator's hottest loop)."""
        key = (names, learner % len(self.offsets))
        got = self._stacks.get(key)
        if got is None:
            off = self.offsets[key[1]]
            got = self._stacks[key] = (
                np.stack([self.curvature[n] for n in names]),
                np.stack([self.center[n] for n in names]),
                np.stack([off[n] for n in names]),
            )
        return got

    def _gradient_rows(
        self, names: tuple[str, ...], theta: np.ndarray, learner: int, rng: np.random.Generator
    ) -> np.ndarray:
        curvature, center, off = self._stacked(names, learner)
        noise = rng.normal(0.0, self.noise, (len(names), self.dims)).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # a learner fed garbage diverges; that is the point
            return (curvature * (theta - center - off) + noise).astype(np.float32)

    def gradient(self, params: Tensors, learner: int, rng: np.random.Generator) -> Tensors:
        """A noisy gradient of learner ``learner``'s objective (data-parallel learners upload it)."""
        names = tuple(params)
        g = self._gradient_rows(names, np.stack(list(params.values())), learner, rng)
        return dict(zip(names, g))

    def sgd_step(self, params: Tensors, learner: int, lr: float, rng: np.random.Generator) -> Tensors:
        """One noisy gradient step on learner ``learner``'s objective."""
        names = tuple(params)
        theta = np.stack(list(params.values()))
        g = self._gradient_rows(names, theta, learner, rng)
        with np.errstate(over="ignore", invalid="ignore"):
            return dict(zip(names, (theta - lr * g).astype(np.float32)))

    def loss(self, params: Mapping[str, np.ndarray]) -> float:
        """Eval loss of global parameters (no noise, no learner shift); inf once they have blown up."""
        with np.errstate(over="ignore", invalid="ignore"):
            total = sum(float(np.sum(self.curvature[n] * (params[n] - self.center[n]) ** 2)) for n in self.shapes)
            return self.floor + 0.5 * total / (len(self.shapes) * self.dims)
