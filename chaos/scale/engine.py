"""``simulate_scale``: a plan in, a :class:`~chaos.scale.result.ScaleResult` out.

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> r = simulate_scale(build_scale_config({"cluster": {"chips": "150k"}, "elastic": False,
    ...                                        "algorithm": {"mode": "data-parallel"}}))
    >>> r.label, round(r.goodput, 2), r.failures > 0
    ('data-parallel, no elasticity', 0.74, True)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from chaos.scale import data_parallel, decoupled, sync_diloco
from chaos.scale.config import ScaleConfig
from chaos.scale.outages import Outages, sit_out, unit_outages
from chaos.scale.result import ScaleResult, Timeline, Trace, summarize

Progress = Callable[[str, float], None]


def simulate_scale(
    cfg: ScaleConfig, *, timeline: bool = False, progress: Progress | None = None, workers: int = 1
) -> ScaleResult:
    """Simulate ``cfg.duration`` of the plan (stopping at its token budget); deterministic given ``cfg.seed``.

    ``timeline`` keeps per-unit segments for :func:`chaos.scale.plots.plot_timeline` (short runs);
    ``progress(stage, fraction)`` is called as the simulation goes; ``workers`` > 1 simulates Decoupled
    DiLoCo's fragments on that many forked processes at once (:func:`chaos.scale.decoupled.each_fragment`): the
    same result, sooner.
    """

    def report(stage: str) -> Callable[[float], None] | None:
        return None if progress is None else (lambda f: progress(stage, f))

    if progress is not None:
        progress("failures", 0.0)
    outages = unit_outages(cfg, float(cfg.duration))
    tl = Timeline() if timeline else None
    mode = cfg.algorithm.mode
    if mode == "data-parallel":
        trace = data_parallel.run(cfg, outages, tl)
    elif mode == "sync-diloco":
        trace = sync_diloco.run(cfg, outages, tl, report("rounds"))
    else:
        trace = decoupled.run(cfg, outages, tl, report("fragments"), workers)
    _charge_sit_outs(cfg, outages, trace)
    if progress is not None:
        progress("done", 1.0)
    return summarize(cfg, trace)


def _charge_sit_outs(cfg: ScaleConfig, outages: list[Outages], trace: Trace) -> None:
    """Elastic units train on fewer replicas while failed ones wait for replacement: take those tokens back."""
    if not cfg.elastic or cfg.recovery.replace_s <= 0:
        return
    replicas = max(1, int(cfg.chips_per_learner // cfg.cluster.chips_per_replica))
    step_wall = trace.details.get("step_wall_s", cfg.workload.step_s)  # data-parallel: exposed comm included
    per_replica_s = cfg.workload.tokens_per_step / cfg.algorithm.num_learners / replicas / step_wall
    for o in outages:
        t, lost = sit_out(o, replicas, cfg.recovery.replace_s, float(cfg.duration))
        trace.correction_times = np.concatenate([trace.correction_times, t])
        trace.correction_tokens = np.concatenate([trace.correction_tokens, -lost * per_replica_s])
