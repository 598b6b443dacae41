"""The progress watchdog on real processes (chaos.watchdog): the controller ends a run whose training stopped for
good and judges it (liveness FAIL, exit 1), instead of waiting for timeout_s and answering "could not be done"."""

from __future__ import annotations

import pytest

from chaos.checkers.bounds import run_pace
from chaos.history import History, StalledPhase
from chaos.scenario import scenario_with
from chaos.watchdog import watchdog_bound
from trainer import events as ev

pytestmark = pytest.mark.chaos


@pytest.mark.chaos_nightly  # ~80 s (3 start-ups + 25 rounds after the heal); per change: test_watchdog_sim.py
@pytest.mark.covers("kill", "liveness")
def test_the_controller_ends_a_stalled_run_and_liveness_fails_naming_the_learner(run_chaos) -> None:
    # Synchronous DiLoCo (K = M, blocking learners) and a syncer that never takes the restarted learner back (the
    # planted bug): after the kill no round reaches its quorum and no learner trains on. Before the watchdog: the
    # run waited for timeout_s and answered "could not be done" (exit 2) without a verdict.
    s = scenario_with(
        "kill-and-rejoin",
        name="stalls-for-good",
        timeout_s=400,
        cluster={
            "token_budget": 1_200_000,
            "syncer": {"planted_bug": "forget_rejoined"},
            "algorithm": {"mode": "sync-diloco"},
        },
        schedule=[{"fault": "kill", "targets": ["learner-1"], "at": 3, "duration": 4}],
        checks={"parity": {"enabled": False}},
    )
    result = run_chaos(s, baseline=False)
    live = next(v for v in result.verdicts if v.name == "liveness")
    assert (result.exit_code, live.status) == (1, "fail"), live.summary
    assert live.evidence["not_taking_part"] == ["learner-1"] and "learner-1 (last merged" in live.summary
    assert live.evidence["learners"]["learner-1"]["refused_since_last_merge"].get("stale_incarnation", 0) > 0
    h = History.read(result.out_dir)
    stall = h.stalled()
    assert stall is not None and stall.first_merge and "measured in this run" in stall.how
    ended = next(r.ts for r in h.records if isinstance(r, StalledPhase))
    last = h.of(ev.Merge)[-1]
    assert live.evidence["last_merge"]["merges_total"] == last.merges_total
    assert ended - last.ts <= 3 * stall.bound_s, (ended - last.ts, stall)
    assert stall.bound_s == pytest.approx(watchdog_bound(run_pace(h)).seconds, abs=0.01)  # the checks' own pace
    assert h.end - h.start < s.timeout_s / 2
    assert result.report.teardown.processes_left == [] and result.report.teardown.proxies_left == []
