"""Seeded failure processes for benchmarks: learner kills drawn from exponential inter-failure times (pure).

Each learner fails independently with mean time between failures ``mtbf_s``
(a Poisson process, as chip interruptions are modelled in the paper); a
failure kills the learner's process, which restarts ``downtime_s`` later
(detection + reallocation; the restart itself then costs process start,
compile and state fetch on top). A learner cannot fail while it is down, and
a failure that would leave fewer than ``min_up`` learners running is dropped
(so Decoupled DiLoCo's "at least K alive" premise holds; the dropped ones are
counted). The schedule is a list of ordinary scenario fault specs, so the
chaos controller injects it and records every kill in the run's history.

Example:
    >>> plan = exponential_kills(learners=["learner-0", "learner-1"], mtbf_s=20.0, downtime_s=3.0,
    ...                          horizon_s=60.0, seed=1)
    >>> plan == exponential_kills(learners=["learner-0", "learner-1"], mtbf_s=20.0, downtime_s=3.0,
    ...                           horizon_s=60.0, seed=1)
    True
    >>> all(f.at + f.downtime_s <= 60.0 + 3.0 for f in plan.failures)
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Failure:
    learner: str
    at: float  # seconds after the first merge
    downtime_s: float

    def spec(self, index: int) -> dict[str, Any]:
        """The scenario fault spec (a kill healed by a restart ``downtime_s`` later)."""
        return {
            "fault": "kill",
            "id": f"fail{index}",
            "targets": [self.learner],
            "at": round(self.at, 3),
            "duration": self.downtime_s,
        }


@dataclass(frozen=True)
class FailurePlan:
    failures: list[Failure] = field(default_factory=list)
    dropped: int = 0  # failures not injected because too few learners would have been up

    def specs(self) -> list[dict[str, Any]]:
        return [f.spec(i) for i, f in enumerate(self.failures)]

    def within(self, seconds: float) -> int:
        """How many failures start before ``seconds`` (a run that ended earlier never saw the rest)."""
        return sum(1 for f in self.failures if f.at < seconds)


def exponential_kills(
    *, learners: list[str], mtbf_s: float, downtime_s: float, horizon_s: float, seed: int, min_up: int = 1
) -> FailurePlan:
    """Kills over ``[0, horizon_s)``: per learner, gaps ~ Exp(mean ``mtbf_s``) counted from when it is back up."""
    if mtbf_s <= 0 or downtime_s < 0 or horizon_s <= 0:
        raise ValueError(
            f"mtbf_s ({mtbf_s}) and horizon_s ({horizon_s}) must be > 0, downtime_s ({downtime_s}) >= 0"
        )
    rng = random.Random(seed)
    candidates: list[Failure] = []
    for lid in learners:  # one stream per learner, drawn in a fixed order: the plan depends on the seed alone
        t = rng.expovariate(1.0 / mtbf_s)
        while t < horizon_s:
            candidates.append(Failure(lid, t, downtime_s))
            t += downtime_s + rng.expovariate(1.0 / mtbf_s)
    kept: list[Failure] = []
    dropped = 0
    for f in sorted(candidates, key=lambda f: (f.at, f.learner)):
        down = sum(1 for k in kept if k.at <= f.at < k.at + k.downtime_s)
        if len(learners) - down - 1 < min_up:
            dropped += 1
            continue
        kept.append(f)
    return FailurePlan(kept, dropped)
