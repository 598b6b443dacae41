"""When each unit (a learner, or the one data-parallel job) is out, from a seeded failure process.

Failures: every chip fails as a Poisson process with mean time between
interruptions ``failures.mtbi_per_chip``, so the run sees ``chips / mtbi``
failures per second, each on a uniformly chosen chip and hence on the unit
holding it; ``failures.schedule`` adds failures at fixed times.

Outages: a **non-elastic** unit is down from the failure for
``detect_s + restart_s + rejoin_s`` (a scheduled failure's ``down_s`` replaces
``detect_s + restart_s``: the real kill-and-restart it mirrors); progress not
yet committed is lost. An **elastic** unit pauses for ``detect_s +
reconfigure_s`` and goes on without the failed replica; nothing is lost.
Failures that hit a unit already out are absorbed by the recovery under way
(one restart or reconfiguration serves them all).

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> cfg = build_scale_config({"elastic": False, "failures": {"mtbi_per_chip": 0, "schedule": [
    ...     {"at": 10, "learner": 0, "down_s": 3}, {"at": 11, "learner": 0}, {"at": 50, "learner": 0}]},
    ...     "recovery": {"rejoin_s": 1}, "algorithm": {"mode": "data-parallel"}})
    >>> o = unit_outages(cfg, horizon=100.0)[0]
    >>> o.starts.tolist(), o.ends.tolist(), o.failures
    ([10.0, 50.0], [14.0, 122.0], 3)
    >>> o.down_between(0.0, 100.0)
    54.0
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from chaos.scale.config import ScaleConfig


@dataclass(frozen=True)
class Outages:
    """One unit's outages: sorted, disjoint ``[starts[i], ends[i])`` intervals."""

    starts: np.ndarray
    ends: np.ndarray
    failure_times: np.ndarray  # every failure that hit this unit, absorbed ones included
    elastic: bool  # True: pauses (nothing lost); False: restarts (uncommitted progress lost)

    def __post_init__(self) -> None:
        # Cumulative outage time before each interval, for O(log n) queries; lists for fast scalar bisects.
        cum = np.concatenate([[0.0], np.cumsum(self.ends - self.starts)])
        object.__setattr__(self, "_cum", cum)
        object.__setattr__(self, "_starts_l", self.starts.tolist())
        object.__setattr__(self, "_ends_l", self.ends.tolist())
        object.__setattr__(self, "_cum_l", cum.tolist())

    @property
    def failures(self) -> int:
        return len(self.failure_times)

    def __len__(self) -> int:
        return len(self.starts)

    def down_before(self, t: float) -> float:
        """Outage seconds in ``[0, t)``."""
        i = bisect.bisect_left(self._starts_l, t)  # type: ignore[attr-defined]
        full: float = self._cum_l[i]  # type: ignore[attr-defined]
        if i > 0 and self._ends_l[i - 1] > t:  # type: ignore[attr-defined]
            full -= self._ends_l[i - 1] - t  # type: ignore[attr-defined]
        return full

    def is_out(self, t: float) -> bool:
        i = bisect.bisect_right(self._starts_l, t)  # type: ignore[attr-defined]
        return i > 0 and self._ends_l[i - 1] > t  # type: ignore[attr-defined]

    def down_between(self, t0: float, t1: float) -> float:
        return self.down_before(t1) - self.down_before(t0)

    def work_before(self, t: float) -> float:
        """Seconds the unit was up in ``[0, t)``: ``t - down_before(t)``, written out (the scale simulator asks
        it once per merged upload)."""
        i = bisect.bisect_left(self._starts_l, t)  # type: ignore[attr-defined]
        if i > 0 and self._ends_l[i - 1] > t:  # type: ignore[attr-defined]
            return t - (self._cum_l[i] - (self._ends_l[i - 1] - t))  # type: ignore[attr-defined]
        return t - self._cum_l[i]  # type: ignore[attr-defined]

    def up_span(self, t: float) -> tuple[float, float, float]:
        """``(lo, hi, down)``: the unit is up throughout ``[lo, hi)``, ``t`` among them, and ``work_before(u)`` is
        ``u - down`` there (an empty span while ``t`` is inside an outage). For a caller asking about many nearby
        times: outages are minutes apart, its questions seconds.

        >>> o = Outages(np.array([10.0]), np.array([15.0]), np.array([10.0]), elastic=True)
        >>> o.up_span(3.0), o.up_span(20.0), o.up_span(12.0)[:2]
        ((-inf, 10.0, 0.0), (15.0, inf, 5.0), (12.0, 12.0))
        """
        i = bisect.bisect_left(self._starts_l, t)  # type: ignore[attr-defined]
        if i > 0 and self._ends_l[i - 1] > t:  # type: ignore[attr-defined]
            return t, t, 0.0
        lo = self._ends_l[i - 1] if i > 0 else -math.inf  # type: ignore[attr-defined]
        hi = self._starts_l[i] if i < len(self._starts_l) else math.inf  # type: ignore[attr-defined]
        return lo, hi, self._cum_l[i]  # type: ignore[attr-defined]

    @property
    def work_at_starts(self) -> np.ndarray:
        """Seconds the unit had been up when each outage began."""
        return self.starts - self._cum[:-1]  # type: ignore[attr-defined]

    def wall_of_work(self, work: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`work_before` (vectorised): when the unit has been up for ``work`` seconds.

        A step that completes exactly at an outage's start completes before it.
        """
        k = np.searchsorted(self.work_at_starts, work, side="left")
        return work + self._cum[k]  # type: ignore[attr-defined]


def _random_failures(cfg: ScaleConfig, horizon: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    mtbi = cfg.failures.mtbi_per_chip
    if mtbi <= 0:
        return np.empty(0), np.empty(0, dtype=np.int64)
    n = int(rng.poisson(cfg.cluster.chips / mtbi * horizon))
    times = np.sort(rng.uniform(0.0, horizon, n))
    # Chips are split evenly over the units, so the unit of a uniformly chosen chip is uniform too.
    units = rng.integers(0, cfg.algorithm.num_learners, n)
    return times, units


def unit_outages(cfg: ScaleConfig, horizon: float) -> list[Outages]:
    """Every unit's outages over ``[0, horizon)``; seeded by ``cfg.seed``."""
    rng = np.random.default_rng(cfg.seed)
    times, units = _random_failures(cfg, horizon, rng)
    rec = cfg.recovery
    default_down = rec.detect_s + (rec.reconfigure_s if cfg.elastic else rec.restart_s)
    rejoin = 0.0 if cfg.elastic else rec.rejoin_s
    sched = [f for f in cfg.failures.schedule if f.at < horizon]
    out = []
    for u in range(cfg.algorithm.num_learners):
        t_u = times[units == u]
        down = np.full(len(t_u), default_down)
        mine = [f for f in sched if f.learner == u]
        if mine:
            t_u = np.concatenate([t_u, [f.at for f in mine]])
            down = np.concatenate([down, [default_down if f.down_s is None else f.down_s for f in mine]])
            order = np.argsort(t_u, kind="stable")
            t_u, down = t_u[order], down[order]
        out.append(_merge(t_u, t_u + down + rejoin, cfg.elastic))
    return out


def _merge(starts: np.ndarray, ends: np.ndarray, elastic: bool) -> Outages:
    """Absorb failures that start while the unit is already out."""
    s_out: list[float] = []
    e_out: list[float] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        if e_out and s < e_out[-1]:
            continue  # the recovery under way serves this failure too
        s_out.append(s)
        e_out.append(e)
    return Outages(
        np.asarray(s_out, dtype=float), np.asarray(e_out, dtype=float), np.asarray(starts, dtype=float), elastic
    )


def sit_out(o: Outages, replicas: int, replace_s: float, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Elastic units: replica-seconds lost while failed replicas wait to be replaced.

    A failed replica sits out from the end of the pause its failure caused until
    ``replace_s`` after the failure; at most ``replicas`` sit out at once (then
    the unit has none left to lose). Returns (when each stretch began, replica-
    seconds lost in it), clipped to ``horizon``; outside pauses only, since a
    pause already idles the whole unit.

    Example:
        >>> import numpy as np
        >>> o = Outages(np.array([10.0]), np.array([15.0]), np.array([10.0, 12.0]), elastic=True)
        >>> t, lost = sit_out(o, replicas=4, replace_s=20.0, horizon=100.0)
        >>> t.tolist(), lost.tolist()          # two replicas out from 15 s; back at 30 s and 32 s
        ([15.0, 30.0], [30.0, 2.0])
    """
    if replace_s <= 0 or not o.elastic or o.failures == 0:
        return np.empty(0), np.empty(0)
    ev: list[tuple[float, int]] = []
    for f in o.failure_times.tolist():
        k = bisect.bisect_right(o._starts_l, f) - 1  # type: ignore[attr-defined]
        start = max(f, o._ends_l[k]) if k >= 0 and o._ends_l[k] > f else f  # type: ignore[attr-defined]
        end = min(f + replace_s, horizon)
        if end > start:
            ev += [(start, +1), (end, -1)]
    ev.sort()
    times, lost = [], []
    n, prev = 0, 0.0
    for t, d in ev:
        if n > 0 and t > prev:
            out = min(n, replicas) * (t - prev - o.down_between(prev, t))
            if out > 0:
                times.append(prev)
                lost.append(out)
        n += d
        prev = t
    return np.asarray(times), np.asarray(lost)
