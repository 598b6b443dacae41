"""The scale simulator against its two references: the paper's goodput table and this project's measured runs.

Both are deterministic (seeded), so a failure here is a change in the simulator's behaviour, not noise.
The full table over a simulated week, several seeds each, runs in the nightly tier
(``tests/nightly/test_scale_nightly.py``).
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import pytest

from benchmarks.claims.scale_bandwidth import needed_gbps, plan
from benchmarks.claims.scale_sim_to_real import REJOIN_S, calibrate, predict
from chaos.scale import ScaleResult, build_scale_config, simulate_scale
from chaos.scale.paper import CHIPS, PAPER_GOODPUT, paper_plan

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "goodput.json"


@functools.cache
def goodput(row: str, chips: float, duration: str = "7d") -> float:
    """One cell's simulated goodput; deterministic, so the tests that compare cells share the rows' runs."""
    return simulate_scale(paper_plan(row, chips, duration=duration)).goodput


@pytest.mark.parametrize("row", ["data-parallel", "data-parallel-elastic"])
def test_data_parallel_rows_match_the_paper_within_5_points(row: str) -> None:
    """Each data-parallel cell, one simulated week at the calibrated recovery times, is within 5 points."""
    diffs = [100 * goodput(row, chips) - paper for chips, paper in zip(CHIPS, PAPER_GOODPUT[row])]
    assert max(abs(d) for d in diffs) <= 5.0, diffs


@pytest.mark.parametrize("m", [2, 4, 8, 16])
def test_decoupled_rows_match_the_paper_within_5_points(m: int) -> None:
    """Each Decoupled DiLoCo cell, one simulated day, is within 5 points of the paper."""
    row = f"decoupled-{m}"
    diffs = [100 * goodput(row, chips, "1d") - paper for chips, paper in zip(CHIPS, PAPER_GOODPUT[row])]
    assert max(abs(d) for d in diffs) <= 5.0, diffs


def test_m_learners_behave_like_one_elastic_job_on_m_times_fewer_chips() -> None:
    """The paper's rule of thumb holds in the simulator: Decoupled M = 8 on 1.2M chips ≈ elastic DP on 150k."""
    decoupled = goodput("decoupled-8", 1.2e6, "1d")
    elastic = goodput("data-parallel-elastic", 150e3)
    assert abs(decoupled - elastic) < 0.01


def test_more_learners_never_lose_goodput_at_fixed_chips() -> None:
    """At 2.4M chips goodput rises with M, and every Decoupled configuration beats elastic data-parallel."""
    elastic = goodput("data-parallel-elastic", 2.4e6)
    values = [goodput(f"decoupled-{m}", 2.4e6, "1d") for m in (2, 4, 8, 16)]
    assert elastic < values[0] < values[1] < values[2] < values[3]


def test_simulator_predicts_the_measured_goodput_runs() -> None:
    """Calibrated on the fault-free real runs, the simulator predicts the runs with failures.

    The runs are ``benchmarks/claims/goodput.py``'s (real syncer and learner processes, seeded kills); the
    simulator gets the same kills. It must count the same failures, and its merged goodput and longest
    stall must be within 0.05 and 1 s of the measured ones (measured 2026-11-30: within 0.03 and 0.4 s).
    """
    doc = json.loads(MEASURED.read_text())
    comparisons = predict(doc, calibrate(doc, REJOIN_S))
    assert {c.run for c in comparisons} == {
        f"{mode}, {kind}"
        for mode in ("sync DiLoCo", "decoupled (defaults)")
        for kind in ("fault-free", "failures")
    }
    for c in comparisons:
        assert c.simulated.failures == c.measured["failures"], c.run
        assert abs(c.merged_goodput - c.measured["merged_goodput"]) <= 0.05, (c.run, c.merged_goodput)
        assert abs(c.simulated.longest_stall_s - c.measured["longest_stall_s"]) <= 1.0, c.run
    sync = {c.run: c for c in comparisons if c.run.startswith("sync")}
    # The paper's point, in both the real runs and the prediction: failures cost sync DiLoCo long stalls.
    assert (
        sync["sync DiLoCo, failures"].simulated.longest_stall_s
        > 3 * sync["sync DiLoCo, fault-free"].simulated.longest_stall_s
    )


def test_bandwidth_claim_twelve_billion_over_four_sites() -> None:
    """The paper's ">20× faster over 2–5 Gbps": at 5 Gbps Decoupled DiLoCo reaches the budget >20× sooner than
    data-parallel; with bf16 fragments at 2 Gbps the link saturates and learners skip syncs."""
    args = argparse.Namespace(
        budget=2e9, params=12e9, chips=1024, sites=4, step=2.5, tokens_per_step=4e6, latency="30ms", seed=0
    )

    def run(gbps: float, mode: str, bpp: float) -> ScaleResult:
        return simulate_scale(build_scale_config(plan(args, gbps, mode, bpp)))

    dp, dec = run(5, "data-parallel", 2.0), run(5, "decoupled", 2.0)
    assert dp.time_to_budget_s is not None and dec.time_to_budget_s is not None
    assert dp.time_to_budget_s / dec.time_to_budget_s > 20
    saturated = run(2, "decoupled", 2.0)
    assert saturated.details["skipped_syncs"] > 0 and saturated.merged_goodput < 0.5
    assert run(2, "decoupled", 0.5).details["skipped_syncs"] == 0
    need = needed_gbps(args)
    assert need["data-parallel (bf16)"] > 100 and need["decoupled (4-bit)"] < 1


@pytest.mark.parametrize(
    "p, h, tau", [(2, 2, 2), (2, 4, 2), (4, 8, 2), (3, 7, 1), (4, 4, 0), (1, 5, 3), (6, 4, 2)]
)
def test_decoupled_counts_what_the_trainers_learner_book_counts(p: int, h: int, tau: int) -> None:
    """One learner, instant links: the simulator merges exactly the steps the trainer's own LearnerBook
    reports in its syncs (which syncs it skips, where counters reset, the τ overlap), driven step by step."""
    from trainer.core.fragment_schedule import FragmentSchedule
    from trainer.core.learner_book import LearnerBook

    steps = 240
    book = LearnerBook(FragmentSchedule(p, h, tau, staggered=True), versions=[0] * p, blocking=False)
    versions = [0] * p
    counted = 0
    for step in range(1, steps + 1):
        for s in book.on_step(step, tokens=1):
            counted += s.c_steps  # alone and instant: merged at once, and the reply is back this step
            versions[s.fragment] += 1
            book.offer(s.fragment, versions[s.fragment], payload=None)
        book.ready(step)
    r = simulate_scale(
        build_scale_config(
            {
                "duration": steps + 0.5,
                "failures": {"mtbi_per_chip": 0},
                "workload": {"step_s": 1, "tokens_per_step": p},
                "algorithm": {
                    "mode": "decoupled",
                    "num_learners": 1,
                    "num_fragments": p,
                    "sync_every": h,
                    "overlap_steps": tau,
                },
            }
        )
    )
    assert r.merged_tokens == counted  # tokens_per_step = P: one merged step counts one token per fragment
