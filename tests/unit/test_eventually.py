"""The eventually phase of the reintegration check: after the last fault, every learner alive and reachable takes
part in merges at its fault-free rate. A rejoined learner that comes back once but then misses every other round
(planted in-process by this test only) fails it, named; the unmodified run passes it, judged."""

from __future__ import annotations

from unittest import mock

import trainer.core.syncer_state as ss
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from trainer.core.reasons import Rejected, RejectReason

OPTS = SimOptions(baseline=False)


def _reintegration():
    r = simulate(scenario_with("kill-and-rejoin"), OPTS)
    return next(v for v in r.verdicts if v.name == "reintegration")


def _half_participation(submit):
    def mutated(self, c, now):
        rec = self.learners.get(c.learner_id)
        if rec is not None and rec.incarnation_index >= 1 and c.round % 2:  # a rejoined learner's odd rounds
            raise Rejected(RejectReason.LATE_ROUND, "planted: a rejoined learner's odd rounds are refused")
        return submit(self, c, now)

    return mutated


def test_an_unmodified_run_is_judged_and_passes() -> None:
    v = _reintegration()
    assert v.status == "pass", v
    phase = v.evidence["eventually"]
    assert phase["judged"] and {r["learner"] for r in phase["learners"]} == {"learner-0", "learner-1", "learner-2"}


def test_a_learner_back_once_but_then_half_absent_is_named() -> None:
    with mock.patch.object(ss.SyncerState, "submit", _half_participation(ss.SyncerState.submit)):
        v = _reintegration()
    assert v.status == "fail", v
    assert "learner-1 in" in v.summary and "learner-0" not in v.summary, v.summary
    first_back = [r for r in v.evidence["learners"] if r["learner"] == "learner-1"]
    assert first_back and first_back[0]["status"] == "pass"  # reintegration alone (its first merge) would pass
