"""The benchmarks' definitions (benchmarks/measures.py, benchmarks/failures.py) on hand-made events."""

from __future__ import annotations

import statistics

import pytest

from benchmarks import measures as m
from benchmarks.common import markdown_table
from benchmarks.failures import exponential_kills
from trainer import events as ev


def merge(
    ts: float, fragment: int = 0, parts: tuple[tuple[str, int], ...] = (), merges_total: int = 1
) -> ev.Merge:
    return ev.Merge(
        ts=ts,
        source="syncer",
        fragment=fragment,
        version=1,
        base_version=0,
        participants=[
            ev.ParticipantInfo(learner_id=lid, incarnation="i", weight=1.0, c_steps=1, c_tokens=tok)
            for lid, tok in parts
        ],
        rule="rda",
        wait_s=0.0,
        quorum_wait_s=0.0,
        outer_grad_norm=1.0,
        merges_total=merges_total,
        tokens_total=0,
    )


def step(ts: float, lid: str, n: int, tokens: int) -> ev.Step:
    return ev.Step(ts=ts, source=lid, step=n, loss=1.0, tokens=tokens, step_time_s=0.05, blocked_s=0.0)


def evaluation(ts: float, loss: float, tokens: int, merges: int = 4, final: bool = False) -> ev.Eval:
    return ev.Eval(
        ts=ts,
        source="syncer",
        merges_total=merges,
        versions=[1],
        loss=loss,
        loss_floor=1.0,
        tokens_total=tokens,
        final=final,
    )


def test_training_start_is_the_first_finished_step_of_any_learner() -> None:
    evs = [step(5.0, "learner-1", 1, 10), step(4.0, "learner-0", 1, 10), step(6.0, "learner-0", 2, 20)]
    assert m.training_start(evs) == 4.0
    assert m.training_start([step(6.0, "learner-0", 2, 20)]) is None


def test_time_to_target_uses_the_first_eval_at_or_below_it() -> None:
    evs = [evaluation(3.0, 3.0, 100), evaluation(5.0, 2.5, 200), evaluation(7.0, 2.4, 300)]
    assert m.first_below(evs, 2.5, t0=1.0) == (4.0, 200)
    assert m.first_below(evs, 2.0, t0=1.0) is None
    assert m.loss_at_tokens(evs, 250) == 2.5


def test_round_period_is_the_median_gap_of_one_fragment_after_warm_up() -> None:
    evs = [merge(t, fragment=0) for t in (0.0, 5.0, 6.0, 7.0, 9.0)] + [merge(6.5, fragment=1)]
    assert m.round_period(evs) == statistics.median([1.0, 1.0, 2.0])  # the first gap (5 s) is warm-up
    assert m.round_period([merge(1.0)]) is None


def test_longest_stall_counts_the_edges_of_the_window() -> None:
    evs = [merge(3.0), merge(4.0)]
    assert m.longest_stall(evs, t0=0.0, t1=10.0) == 6.0
    assert m.longest_stall([], t0=0.0, t1=2.0) == 2.0


def test_goodput_counts_each_trained_token_once_per_fragment() -> None:
    # Two learners, P = 2: each trained 400 tokens; learner-0's 400 reached merges (200 per fragment, twice),
    # learner-1's fragment-1 upload never merged.
    evs = [
        step(1.0, "learner-0", 4, 400),
        step(1.0, "learner-1", 4, 400),
        merge(2.0, 0, (("learner-0", 400), ("learner-1", 400))),
        merge(2.5, 1, (("learner-0", 400),)),
    ]
    g = m.goodput(evs, num_fragments=2, nominal_tokens_per_s=100.0, t0=0.0, t1=10.0)
    assert (g.merged_tokens, g.trained_tokens) == (600, 800)
    assert g.compute == pytest.approx(0.75)
    assert g.merged == pytest.approx(600 / 1000)


def test_participation_per_learner() -> None:
    sent = [
        ev.SyncResult(
            ts=1.0, source=lid, fragment=0, base_version=0, accepted=True, reason="", seconds=0.1, bytes=1
        )
        for lid in ("learner-0", "learner-0", "learner-1")
    ]
    evs = [*sent, merge(2.0, 0, (("learner-0", 1), ("learner-1", 1)))]
    assert m.participation(evs) == {"per_merge": 2.0, "learner-0": 0.5, "learner-1": 1.0}


def test_final_eval_prefers_the_final_one() -> None:
    assert m.final_eval_loss([evaluation(1.0, 3.0, 1), evaluation(2.0, 2.0, 2, final=True)]) == 2.0
    assert m.final_eval_loss([evaluation(1.0, 3.0, 1)]) == 3.0
    assert m.final_eval_loss([]) is None


def test_exponential_kills_are_seeded_and_respect_downtime_and_min_up() -> None:
    ids = [f"learner-{i}" for i in range(4)]
    plan = exponential_kills(learners=ids, mtbf_s=10.0, downtime_s=3.0, horizon_s=2000.0, seed=5)
    assert plan == exponential_kills(learners=ids, mtbf_s=10.0, downtime_s=3.0, horizon_s=2000.0, seed=5)
    assert plan != exponential_kills(learners=ids, mtbf_s=10.0, downtime_s=3.0, horizon_s=2000.0, seed=6)
    for lid in ids:  # a learner never fails again while it is down
        mine = [f.at for f in plan.failures if f.learner == lid]
        assert all(b - a >= 3.0 for a, b in zip(mine, mine[1:]))
    # The rate: one failure per (mtbf + downtime) per learner, before drops.
    assert (len(plan.failures) + plan.dropped) / (4 * 2000 / 13.0) == pytest.approx(1.0, abs=0.15)
    for f in plan.failures:  # never fewer than min_up (1) learners up
        assert sum(1 for g in plan.failures if g.at <= f.at < g.at + g.downtime_s) <= 3
    strict = exponential_kills(learners=ids, mtbf_s=2.0, downtime_s=3.0, horizon_s=200.0, seed=5, min_up=3)
    assert strict.dropped > 0
    assert all(sum(1 for g in strict.failures if g.at <= f.at < g.at + g.downtime_s) <= 1 for f in strict.failures)
    assert plan.specs()[0]["fault"] == "kill" and plan.within(0.0) == 0


def test_exponential_kills_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="mtbf_s"):
        exponential_kills(learners=["learner-0"], mtbf_s=0.0, downtime_s=1.0, horizon_s=10.0, seed=0)


def test_markdown_table_formats_cells() -> None:
    assert markdown_table(["a", "b"], [[0.123456, None]]).splitlines()[-1] == "| 0.123 | — |"
