"""Synchronous DiLoCo at scale: M learners, every H steps a blocking round with all of them.

Each learner computes H inner steps (the round's sync step comes from the
trainer's :class:`~trainer.core.fragment_schedule.FragmentSchedule`), uploads the whole
model, and waits. The round merges when the trainer's quorum rule
(:func:`~trainer.core.grace.merge_time`, K = M) says so — that is, when the
last learner's upload is in — and everyone downloads the result. A learner
that fails mid-round restarts (non-elastic: loses the round's work and redoes
it after rejoining) or pauses (elastic); either way every other learner waits.

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> from chaos.scale.outages import unit_outages
    >>> cfg = build_scale_config({"elastic": False, "duration": 100,
    ...     "algorithm": {"mode": "sync-diloco", "num_learners": 2, "sync_every": 10},
    ...     "workload": {"step_s": 1, "tokens_per_step": 10},
    ...     "failures": {"mtbi_per_chip": 0, "schedule": [{"at": 15, "learner": 1, "down_s": 5}]}})
    >>> t = run(cfg, unit_outages(cfg, 100.0))
    >>> t.update_times[:3].tolist()     # learner 1 lost 5 s of work and 5 s down: round 2 ends at 30
    [10.0, 30.0, 40.0]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from chaos.scale.config import ScaleConfig
from chaos.scale.links import comm_times, transfer_s
from chaos.scale.outages import Outages
from chaos.scale.result import COMM, WAIT, Timeline, Trace
from trainer.core.ema import Ema
from trainer.core.grace import Timing, merge_time


def _finish(o: Outages, k: int, t: float, work: float, lost: list[float]) -> tuple[float, int]:
    """When a learner starting at ``t`` has done ``work`` seconds; ``k`` indexes its first outage not yet
    behind it. Non-elastic outages restart the work (appending the lost seconds); elastic ones pause it."""
    remaining = work
    starts, ends = o.starts, o.ends
    while k < len(starts) and starts[k] < t + remaining:
        s, e = float(starts[k]), float(ends[k])
        if e > t:
            done = max(0.0, s - t)
            if o.elastic:
                remaining -= done
            else:
                lost.append(done)
                remaining = work
            t = e
        k += 1
    return t + remaining, k


def run(
    cfg: ScaleConfig,
    outages: list[Outages],
    timeline: Timeline | None = None,
    progress: Callable[[float], None] | None = None,
) -> Trace:
    a, w = cfg.algorithm, cfg.workload
    m = a.num_learners
    fragment_schedule = a.fragment_schedule()
    sync_step = max(fragment_schedule.offset(p) for p in range(a.num_fragments))  # = H: every fragment at once
    work = [sync_step * cfg.step_s(i) for i in range(m)]
    policy = a.quorum
    timing = Timing(t_step=Ema(value=w.step_s))
    up = transfer_s(cfg.model_bytes, cfg.network.bandwidth, cfg.network.latency)
    down = comm_times(cfg).round_s - up
    per_learner = w.tokens_per_step / m * sync_step
    horizon = float(cfg.duration)
    ks = [0] * m
    ends: list[float] = []
    lost: list[float] = []
    t0, rounds = 0.0, 0
    while True:
        finishes = []
        for i, o in enumerate(outages):
            f, ks[i] = _finish(o, ks[i], t0, work[i], lost)
            finishes.append(f)
        arrivals = sorted(f + up for f in finishes)
        merged_at = merge_time(policy, timing, arrivals[a.min_quorum - 1], m, m)
        assert merged_at is not None  # every learner contributed
        end = merged_at + down
        if end > horizon:
            break
        if timeline is not None:
            last = max(finishes)
            for i, f in enumerate(finishes):
                timeline.add_unit(i, outages[i], t0, f)
                timeline.add(i, f, last, WAIT)
                timeline.add(i, last, end, COMM)
        ends.append(end)
        t0 = end
        rounds += 1
        if progress is not None and rounds % 2048 == 0:
            progress(t0 / horizon)
    lost_s = sum(lost)
    rate = w.tokens_per_step / m / w.step_s  # of the redone work (at the plan's step time)

    def trained_at(t: float) -> float:
        # Work of the rounds merged by t, plus what restarts threw away (both were computed).
        k = int(np.searchsorted(np.asarray(ends), t, side="right"))
        return k * per_learner * m + rate * lost_s * (k / max(rounds, 1))

    return Trace(
        np.asarray(ends),
        np.full(len(ends), per_learner * m),
        trained_at=trained_at,
        failure_times=np.concatenate([o.failure_times for o in outages]),
        timeline=timeline,
        details={
            "round_work_s": max(work),
            "round_comm_s": up + down,
            "rounds": float(rounds),
            "redone_work_s": lost_s,
        },
    )
