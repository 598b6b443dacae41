"""What a simulated run produced (:class:`Trace`) and what it means (:class:`ScaleResult`).

Definitions (the same as the real benchmarks', ``benchmarks/measures.py``; the words: ``docs/design.md``):

- **goodput** (the paper's): useful chip time over allocated chip time, as
  ``useful tokens / (wall × nominal tokens per second)``, the nominal rate being
  what every learner trains at its own step time when it never waits. Useful:
  trained and not thrown away by a failure (a restart's lost progress, a
  rollback, a round redone) and not idle (down, paused, waiting, blocked on
  communication).
- **merged goodput** (what the real benchmarks can measure): the same with
  merged tokens. It is lower for Decoupled DiLoCo, which also loses the τ
  overlap steps a received fragment overwrites and refused stale uploads.
- **compute goodput**: merged tokens over trained tokens.
- **longest global stall**: the longest stretch in which the global model did
  not advance (no merge; for data-parallel, no step).
- **time to budget**: when the merged tokens (or, with ``budget_counts:
  trained``, the trained ones) reached ``token_budget``; the run's wall time
  ends there.

Example:
    >>> import numpy as np
    >>> from chaos.scale.config import build_scale_config
    >>> cfg = build_scale_config({"cluster": {"chips": 10}, "duration": 100, "token_budget": 500,
    ...     "workload": {"step_s": 1, "tokens_per_step": 10}})
    >>> t = Trace(np.array([10.0, 20.0, 60.0]), np.array([100.0, 100.0, 300.0]),
    ...           trained_at=lambda s: 10.0 * s, failure_times=np.array([30.0, 80.0]))
    >>> r = summarize(cfg, t)
    >>> r.wall_s, r.goodput, r.longest_stall_s, r.time_to_budget_s, r.failures   # the failure at 80 s came later
    (60.0, 0.8333333333333334, 40.0, 60.0, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chaos.scale.config import ScaleConfig
from chaos.scale.outages import Outages
from chaos.scale.quantities import format_count, format_duration

# Timeline states, in drawing order.
TRAIN, WAIT, COMM, PAUSED, DOWN = "train", "wait", "comm", "paused", "down"
STATES: tuple[str, ...] = (TRAIN, WAIT, COMM, PAUSED, DOWN)


@dataclass(frozen=True)
class Segment:
    """One unit in one state over ``[start, end)``."""

    unit: int
    start: float
    end: float
    state: str


@dataclass
class Timeline:
    """Per-unit segments and merge times of a (short) run, for the timeline picture."""

    segments: list[Segment] = field(default_factory=list)
    updates: list[float] = field(default_factory=list)  # when the global model advanced
    limit: int = 20_000
    truncated: bool = False

    def add_unit(self, unit: int, o: Outages, t0: float, t1: float, running: str = TRAIN) -> None:
        """The unit's own time in ``[t0, t1)``: ``running`` between its outages, paused or down during them."""
        out = PAUSED if o.elastic else DOWN
        t = t0
        k = int(np.searchsorted(o.ends, t0, side="right"))
        while k < len(o) and o.starts[k] < t1:
            s, e = max(float(o.starts[k]), t0), min(float(o.ends[k]), t1)
            self.add(unit, t, s, running)
            self.add(unit, s, e, out)
            t = e
            k += 1
        self.add(unit, t, t1, running)

    def add(self, unit: int, start: float, end: float, state: str) -> None:
        if end <= start:
            return
        if len(self.segments) >= self.limit:
            self.truncated = True
            return
        self.segments.append(Segment(unit, start, end, state))


@dataclass
class Trace:
    """A mode's raw output: when the global model advanced and by how many tokens."""

    update_times: np.ndarray
    update_tokens: np.ndarray
    trained_at: Callable[[float], float]  # tokens trained in [0, t), merged or not
    failure_times: np.ndarray  # every failure, all units
    # Tokens of useful training in [0, t) (the paper's goodput counts these): trained and not thrown
    # away by a failure. None: the merged tokens (modes where training only counts once merged).
    useful_at: Callable[[float], float] | None = None
    timeline: Timeline | None = None
    details: dict[str, float] = field(default_factory=dict)
    # Tokens taken back without the model advancing (a rollback, replicas sitting out): they count
    # against the merged total but are not updates.
    correction_times: np.ndarray = field(default_factory=lambda: np.empty(0))
    correction_tokens: np.ndarray = field(default_factory=lambda: np.empty(0))


@dataclass(frozen=True)
class ScaleResult:
    """The figures of one simulated run; ``to_json`` is what the CLI and benchmarks record."""

    name: str
    mode: str
    elastic: bool
    chips: float
    learners: int
    wall_s: float
    goodput: float
    merged_goodput: float
    compute_goodput: float
    merged_tokens: float
    trained_tokens: float
    longest_stall_s: float
    longest_stall_at: float
    time_to_budget_s: float | None
    failures: int
    updates: int
    details: dict[str, float]  # mode-specific counters, over the whole simulated duration
    timeline: Timeline | None = None

    @property
    def label(self) -> str:
        if self.mode == "data-parallel":
            return f"data-parallel, {'elastic' if self.elastic else 'no elasticity'}"
        return f"{self.mode} M={self.learners}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "elastic": self.elastic,
            "chips": self.chips,
            "learners": self.learners,
            "wall_s": round(self.wall_s, 3),
            "goodput": round(self.goodput, 5),
            "merged_goodput": round(self.merged_goodput, 5),
            "compute_goodput": round(self.compute_goodput, 5),
            "merged_tokens": self.merged_tokens,
            "trained_tokens": self.trained_tokens,
            "longest_stall_s": round(self.longest_stall_s, 3),
            "longest_stall_at": round(self.longest_stall_at, 3),
            "time_to_budget_s": None if self.time_to_budget_s is None else round(self.time_to_budget_s, 3),
            "failures": self.failures,
            "updates": self.updates,
            "details": {k: round(v, 6) for k, v in self.details.items()},
        }

    def summary(self) -> str:
        budget = "not reached" if self.time_to_budget_s is None else format_duration(self.time_to_budget_s)
        return (
            f"{self.label}: goodput {self.goodput:.1%} (merged {self.merged_goodput:.1%}, "
            f"compute {self.compute_goodput:.1%}), "
            f"longest global stall {format_duration(self.longest_stall_s)}, "
            f"time to budget {budget}, {self.failures} failures, "
            f"{format_count(self.merged_tokens)} tokens merged in {format_duration(self.wall_s)}"
        )


def _first_time_trained(trace: Trace, budget: float, horizon: float) -> float | None:
    """When ``trained_at`` (non-decreasing) first reaches ``budget``; bisection to a microsecond."""
    if trace.trained_at(horizon) < budget:
        return None
    lo, hi = 0.0, horizon
    while hi - lo > 1e-6 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if trace.trained_at(mid) >= budget else (mid, hi)
    return hi


def summarize(cfg: ScaleConfig, trace: Trace) -> ScaleResult:
    """Cut the trace at the token budget (if reached) or the duration, and compute the figures."""
    all_t = np.concatenate([trace.update_times, trace.correction_times])
    all_tok = np.concatenate([trace.update_tokens, trace.correction_tokens])
    # At equal times corrections go first: a rollback at the instant of a step must not let that step
    # count the budget as reached.
    is_update = np.concatenate([np.ones(len(trace.update_times)), np.zeros(len(trace.correction_times))])
    order = np.lexsort((is_update, all_t))
    all_t, cum, is_update = all_t[order], np.cumsum(all_tok[order]), is_update[order]
    wall = float(cfg.duration)
    reached: float | None = None
    if cfg.token_budget > 0 and cfg.budget_counts == "trained":
        reached = _first_time_trained(trace, cfg.token_budget, wall)
    elif cfg.token_budget > 0:
        k = int(np.argmax(cum >= cfg.token_budget)) if len(cum) and cum.max() >= cfg.token_budget else None
        if k is not None:
            reached = float(all_t[k])
    if reached is not None:
        wall = reached
    merged = max(0.0, float(cum[all_t <= wall][-1])) if (all_t <= wall).any() else 0.0
    times = all_t[is_update == 1]  # already in order: no second sort
    keep = times <= wall
    t_kept = times[keep]
    gaps = np.diff(np.concatenate([[0.0], t_kept, [wall]]))
    i = int(np.argmax(gaps)) if len(gaps) else 0
    starts = np.concatenate([[0.0], t_kept])
    if trace.timeline is not None:
        trace.timeline.updates = t_kept[: trace.timeline.limit].tolist()
    trained = float(trace.trained_at(wall))
    taken_back = float(trace.correction_tokens[trace.correction_times <= wall].sum())  # e.g. replicas sitting out
    useful = merged if trace.useful_at is None else max(0.0, float(trace.useful_at(wall)) + taken_back)
    nominal = cfg.nominal_tokens_per_s * wall
    return ScaleResult(
        name=cfg.name,
        mode=cfg.algorithm.mode,
        elastic=cfg.elastic,
        chips=cfg.cluster.chips,
        learners=cfg.algorithm.num_learners,
        wall_s=wall,
        goodput=useful / nominal if nominal else 0.0,
        merged_goodput=merged / nominal if nominal else 0.0,
        compute_goodput=merged / trained if trained else 0.0,
        merged_tokens=merged,
        trained_tokens=trained,
        longest_stall_s=float(gaps[i]) if len(gaps) else wall,
        longest_stall_at=float(starts[i]) if len(gaps) else 0.0,
        time_to_budget_s=reached,
        failures=int((trace.failure_times <= wall).sum()),
        updates=int(keep.sum()),
        details=dict(trace.details),
        timeline=trace.timeline,
    )
