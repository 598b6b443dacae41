"""A learner's lookahead for its next step boundary (trainer.core.step_timer) on heavy-tailed step times."""

from __future__ import annotations

import random
import statistics

import pytest

from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.learner_book import LearnerBook
from trainer.core.rounds import StepClock, sync_step
from trainer.core.step_timer import CLIP, StepTimes


def _given(x: float | None) -> float:
    """A sync start's lookahead or header-lag margin: a clocked learner's start has both."""
    assert x is not None
    return x


PACE = 0.1


def _syncs(rule: str, sync_every: int, seed: int, steps: int = 2000) -> tuple[float, float]:
    """(share of syncs that start after their round's opening, mean steps a sync starts before it) for one learner
    whose steps are lognormal (σ 0.6: a tenth of them over 2.2× the median, as on a shared 2-core machine), on a
    clock at the median pace, looking ahead by its mean step time or by the step_timer quantile."""
    rng = random.Random(seed)
    sched = FragmentSchedule(1, sync_every, 1, staggered=True)
    clock = StepClock(0.0, 0.0, PACE)
    book = LearnerBook(sched, [0], blocking=False, clocked=True)
    t, times, mean = 0.0, StepTimes(), None
    after, early = 0, []
    for k in range(1, steps + 1):
        d = PACE * rng.lognormvariate(0.0, 0.6)
        t += d
        times = times.update(d)
        mean = d if mean is None else 0.9 * mean + 0.1 * d
        ahead = mean if rule == "mean" else times.lookahead(sync_every)
        for s in book.on_step(k, 1, sync_step(clock, t, ahead)):
            opening = clock.time_of(sched.offset(0) + s.round * sync_every)
            assert opening is not None
            after += t > opening
            early.append(max(opening - t, 0.0) / PACE)
        book.sync_failed(0, 0)  # no answers in this test: the counters carry on
    return after / len(early), statistics.mean(early)


@pytest.mark.parametrize("sync_every", [8, 32])
def test_heavy_tailed_steps_rarely_sync_after_the_opening(sync_every: int) -> None:
    """About 1/H of syncs may start after their round opened (each costs the round's progress on the fragment);
    syncing early costs a step or two (measured: 6–11% and 1.2 steps at H = 8, 0–7% and 2 steps at H = 32)."""
    runs = [_syncs("quantile", sync_every, seed) for seed in range(3)]
    assert max(a for a, _ in runs) <= 1 / sync_every + 0.05, runs
    assert max(e for _, e in runs) <= sync_every / 4, runs


@pytest.mark.parametrize("sync_every", [8, 32])
def test_negative_control_the_mean_step_time_syncs_after_the_opening_often(sync_every: int) -> None:
    """Looking ahead by the mean step time (the rule before): 19–26% of syncs start after the opening."""
    runs = [_syncs("mean", sync_every, seed) for seed in range(3)]
    assert min(a for a, _ in runs) > 1 / sync_every + 0.05, runs


def test_a_stall_widens_the_lookahead_by_at_most_clip_medians() -> None:
    t = StepTimes()
    for _ in range(100):
        t = t.update(PACE)
    stalled = t.update(8.0)  # an 8 s SIGSTOP between two boundaries
    assert stalled.lookahead(500) == pytest.approx(CLIP * PACE)
    assert stalled.lookahead(8) == pytest.approx(PACE)  # the 7/8 quantile does not see one stall
    assert len(stalled.periods) == 64 and StepTimes().update(float("nan")).periods == ()


def test_deterministic_mode_looks_ahead_as_the_config_says() -> None:
    """``learner.sync_lookahead``: the mean (default) is the nominal step time; the quantile of jittered steps is
    above it (deterministic mode shares the rule with the trainer's learner). Both add the header-lag margin
    (trainer.core.header_lag): here the clock reading's lag and the link's latency, 2 × 0.5 ms."""
    from chaos.scenario import ScenarioError, parse_scenario
    from chaos.sim import SimOptions, simulate
    from trainer import events as ev

    def lookaheads(rule: str) -> list[float]:
        s = parse_scenario(
            {
                "name": "t",
                "cluster": {"token_budget": 300_000, "learner": {"sync_lookahead": rule}},
                "schedule": [],
            }
        )
        r = simulate(s, SimOptions(baseline=False, step_jitter=0.5))
        starts = [e for e in r.history.events if isinstance(e, ev.SyncStartEvent)]
        margins = [_given(e.lag_margin_steps) for e in starts]
        assert margins[0] == 0 and max(margins) == pytest.approx(2 * SimOptions().latency_s / nominal, rel=0.1)
        return [_given(e.lookahead_s) - m * nominal for e, m in zip(starts, margins)]

    nominal = SimOptions().step_time_s
    mean, quantile = lookaheads("mean"), lookaheads("quantile")
    assert mean and all(x == pytest.approx(nominal, abs=1e-4) for x in mean)
    assert quantile and statistics.median(quantile) > 1.2 * nominal
    with pytest.raises(ScenarioError, match="sync_lookahead"):
        lookaheads("max")
