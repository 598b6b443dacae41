"""The system-under-test boundary (chaos.sut): every check declares its evidence; our trainer provides all of it;
a system that cannot give a check its evidence gets that check not applicable, with its reasons — never a pass —
and a run's status is decided by the checks that applied."""

from __future__ import annotations

from chaos.checkers import CHECKERS, CheckInput, RunFacts, Verdict, overall, run_checks
from chaos.ci_output import _case
from chaos.history import History
from chaos.scenario import scenario_with
from chaos.sim import SimOptions
from chaos.sim.runner import Simulation, plan
from chaos.sut import EVIDENCE, NEEDS, OURS, SystemUnderTest


def test_every_check_declares_its_evidence_and_ours_provides_all() -> None:
    assert set(NEEDS) == set(CHECKERS)
    assert all(NEEDS[c] <= set(EVIDENCE) for c in NEEDS)
    assert all(not OURS.lacks(c) for c in CHECKERS)


def test_a_check_without_its_evidence_is_not_applicable_with_the_reason_never_a_pass() -> None:
    s = scenario_with("kill-and-rejoin")
    sim = Simulation(s, SimOptions(baseline=False), plan(s))
    sim.run()
    history = History(sorted(sim.records, key=lambda r: r.ts), sorted(sim.events, key=lambda e: e.ts))
    inp = CheckInput(history, RunFacts.of(s), s.checks, None)
    mute = SystemUnderTest("mute", frozenset({"merges"}), {"checkpoints": "it keeps none"})
    verdicts = {v.name: v for v in run_checks(inp, mute)}
    assert {n for n, v in verdicts.items() if v.status != "not_applicable"} == {"liveness", "reintegration"}
    d = verdicts["durability"]
    assert "mute does not provide checkpoints (it keeps none)" in d.summary
    assert d.evidence["lacks"] == {"checkpoints": "it keeps none", "syncer_evals": "not provided"}


def test_not_applicable_decides_nothing_and_reads_as_skipped() -> None:
    na = Verdict("audit", "not_applicable", "x does not provide kept_merges")
    assert overall([Verdict("liveness", "pass", ""), na])[0] == "pass"
    assert overall([Verdict("liveness", "indeterminate", ""), na])[0] == "indeterminate"
    case = _case("c", "audit", na.status, na.summary, {})
    assert case.find("skipped") is not None and case.find("failure") is None and case.find("error") is None
