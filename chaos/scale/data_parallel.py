"""Data-parallel at scale: one job over every chip, a gradient all-reduce every step.

Every step takes ``step_s`` plus the all-reduce time the step cannot hide
(:mod:`chaos.scale.links`) plus ``round_overhead_s``. A failure stops the
whole job: non-elastic, for a restart, losing the progress since the last
checkpoint (``recovery.checkpoint_every_s``; 0: only the step in flight);
elastic, for a reconfiguration, after which the job goes on without the
failed replica (its chips idle for ``recovery.replace_s``: :func:`chaos.scale.outages.sit_out`).

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> from chaos.scale.outages import unit_outages
    >>> cfg = build_scale_config({"elastic": False, "duration": 100, "algorithm": {"mode": "data-parallel"},
    ...     "workload": {"step_s": 1, "tokens_per_step": 10},
    ...     "failures": {"mtbi_per_chip": 0, "schedule": [{"at": 10.5, "learner": 0, "down_s": 20}]}})
    >>> t = run(cfg, unit_outages(cfg, 100.0))
    >>> len(t.update_times), float(t.update_tokens.sum()), len(t.failure_times)  # steps end at 1..10, then 31.5..99.5
    (79, 790.0, 1)
"""

from __future__ import annotations

import numpy as np

from chaos.scale.config import ScaleConfig
from chaos.scale.links import comm_times
from chaos.scale.outages import Outages
from chaos.scale.result import COMM, TRAIN, Timeline, Trace


def run(cfg: ScaleConfig, outages: list[Outages], timeline: Timeline | None = None) -> Trace:
    (o,) = outages
    comm = comm_times(cfg)
    step_wall = cfg.workload.step_s + comm.dp_exposed_s + cfg.network.round_overhead_s
    per_step = cfg.workload.tokens_per_step
    horizon = float(cfg.duration)
    ckpt = 0.0 if cfg.elastic else cfg.recovery.checkpoint_every_s
    up_starts = np.concatenate([[0.0], o.ends])
    up_ends = np.concatenate([o.starts, [horizon]])
    times: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    fix_t: list[float] = []
    fix_tok: list[float] = []
    lost_tokens = 0.0
    for a, b, failed in zip(up_starts.tolist(), up_ends.tolist(), [True] * len(o) + [False]):
        if b <= a or a >= horizon:
            continue
        n = int((min(b, horizon) - a) // step_wall)
        steps = a + step_wall * np.arange(1, n + 1)
        times.append(steps)
        tokens.append(np.full(n, per_step))
        if failed and ckpt > 0:
            # Roll back to the last checkpoint: the steps after it stop counting.
            kept = int(((b - a) // ckpt) * ckpt // step_wall)
            if n > kept:
                fix_t.append(b)
                fix_tok.append(-(n - kept) * per_step)
                lost_tokens += (n - kept) * per_step
    if timeline is not None:
        timeline.add_unit(0, o, 0.0, horizon, TRAIN if comm.dp_exposed_s == 0 else COMM)
    rate = per_step / step_wall
    return Trace(
        np.concatenate(times) if times else np.empty(0),
        np.concatenate(tokens) if tokens else np.empty(0),
        trained_at=lambda t: rate * o.work_before(t),
        failure_times=o.failure_times,
        timeline=timeline,
        details={
            "step_wall_s": step_wall,
            "exposed_comm_s": comm.dp_exposed_s,
            "allreduce_s": comm.dp_allreduce_s,
            "rolled_back_tokens": lost_tokens,
        },
        correction_times=np.asarray(fix_t, dtype=float),
        correction_tokens=np.asarray(fix_tok, dtype=float),
    )
