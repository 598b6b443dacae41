"""The progress watchdog in deterministic mode (chaos.watchdog): a run whose training stops forever is ended and
judged (liveness FAIL, exit 1) within a few times its own bound, not left to its timeout; runs that pause on purpose,
or keep training while merges wait, are not ended early."""

from __future__ import annotations

import pytest

from chaos.checkers.bounds import run_pace
from chaos.exit_codes import ExitCode
from chaos.scenario import scenario_with
from chaos.sim import simulate
from chaos.sim.runner import T0
from chaos.watchdog import watchdog_bound
from trainer import events as ev

pytestmark = pytest.mark.chaos_simulation

CLUSTER = {"token_budget": 1_200_000}
# K = M and a learner the syncer never takes back (the planted bug): no round reaches its quorum again. Blocking
# learners wait for their merged fragments, so the token count stops growing too: training has stopped for good.
NEVER_AGAIN = {
    "token_budget": 1_200_000,
    "syncer": {"planted_bug": "forget_rejoined"},
    "algorithm": {"min_quorum": 3, "blocking": True},
}
SYNC_DILOCO = {
    **NEVER_AGAIN,
    "algorithm": {"mode": "sync-diloco"},
}  # K = M and blocking by the mode (the real test's)
KILL = [{"fault": "kill", "targets": ["learner-1"], "at": 3, "duration": 4}]


def _liveness(r):
    return next(v for v in r.verdicts if v.name == "liveness")


@pytest.mark.parametrize("cluster", [NEVER_AGAIN, SYNC_DILOCO], ids=["decoupled-blocking", "sync-diloco"])
def test_a_learner_that_never_rejoins_under_a_quorum_of_all_ends_the_run_with_liveness_failing(cluster) -> None:
    s = scenario_with("kill-and-rejoin", name="never-again", cluster=cluster, schedule=KILL)
    r = simulate(s)
    assert not r.timed_out and r.stalled, f"{r.status} after {r.virtual_s:.0f} virtual s"
    assert (r.status, r.exit_code) == ("fail", ExitCode.FAIL)
    v = _liveness(r)
    assert v.status == "fail", v.summary
    assert v.evidence["not_taking_part"] == ["learner-1"] and "learner-1 (last merged" in v.summary
    assert v.evidence["learners"]["learner-1"]["refused_since_last_merge"].get("stale_incarnation", 0) > 0
    last = r.history.of(ev.Merge)[-1]
    assert v.evidence["last_merge"]["merges_total"] == last.merges_total
    # Ended within 3 × its own bound of the stall's start (the last merge), and teardown ran as after a finish.
    stall = r.history.stalled()
    assert stall is not None
    assert r.virtual_s - (last.ts - T0) <= 3 * stall.bound_s
    assert stall.bound_s == pytest.approx(watchdog_bound(run_pace(r.history)).seconds, abs=1e-3)  # the same bound
    assert r.virtual_s < s.timeout_s / 10
    teardown = r.history.teardown()
    assert teardown is not None and teardown.processes_left == []
    assert not r.history.of(ev.Finished) and r.history.phase("finished") is None


def test_a_fault_free_run_is_not_ended_early() -> None:
    r = simulate(scenario_with("kill-and-rejoin", name="clean", schedule=[]))  # the built-in's budget: 2.4M tokens
    assert not r.stalled and not r.timed_out and r.history.of(ev.Finished), [v.summary for v in r.verdicts]
    assert r.history.stalled() is None and _liveness(r).status == "pass", _liveness(r).summary
    steady, bound = r.history.phase("steady"), watchdog_bound(run_pace(r.history)).seconds
    assert steady is not None and bound is not None and r.virtual_s - (steady.ts - T0) > bound


def test_a_long_pause_of_every_learner_that_heals_is_not_ended_early() -> None:
    # Paused for far longer than the watchdog's bound (~17 virtual s here): no progress at all, on purpose.
    pause = [{"fault": "pause", "targets": "all", "at": 2, "duration": 60}]
    r = simulate(scenario_with("kill-and-rejoin", name="long-pause", cluster=CLUSTER, schedule=pause))
    assert not r.stalled and r.history.of(ev.Finished), _liveness(r).summary
    assert _liveness(r).status == "pass", _liveness(r).summary
    w = r.history.fault_windows()[0]
    assert w.end is not None and w.end - w.start == pytest.approx(60)
    bound = watchdog_bound(run_pace(r.history)).seconds
    assert bound is not None and 60 > 3 * bound


def test_merges_stopped_while_learners_keep_training_is_left_to_finish() -> None:
    # Not blocking: the learners train on (the token count grows) until the budget, for longer than the watchdog's
    # bound after the heal, with no merge in between; the liveness check judges that gap.
    cluster = {**NEVER_AGAIN, "token_budget": 2_400_000, "algorithm": {"min_quorum": 3}}
    r = simulate(scenario_with("kill-and-rejoin", name="tokens-grow", cluster=cluster, schedule=KILL))
    assert not r.stalled and r.history.of(ev.Finished)
    v = _liveness(r)
    assert v.status == "fail" and "no merge of fragment" in v.summary and "stalled" not in v.evidence
    heal = r.history.fault_windows()[0].end
    merges = [m.ts for m in r.history.of(ev.Merge)]
    after = min(t for t in merges if t > heal)  # the first merge after the heal: the budget's flush
    assert after - heal > watchdog_bound(run_pace(r.history)).seconds
