"""Negative controls: deliberately wrong set-ups that the matching checker must catch.

A checker that cannot fail proves nothing. Each case breaks one thing on
purpose and asserts that exactly the checker watching it reports ``fail``.
"""

from __future__ import annotations

import pytest

from chaos.scenario import scenario_with

pytestmark = pytest.mark.chaos


def _verdict(result, name):
    return next(v for v in result.verdicts if v.name == name)


def test_quorum_of_all_learners_stalls_merges_and_liveness_fails(run_chaos):
    # K = M: one dead learner and no round can ever reach its quorum again.
    s = scenario_with("kill-one-learner", cluster={"algorithm": {"min_quorum": 3}})
    result = run_chaos(s, baseline=False)
    v = _verdict(result, "liveness")
    assert v.status == "fail", v
    assert v.evidence["longest_gap_while_reachable_s"] > s.checks.liveness.max_gap_s
    assert result.exit_code == 1


def test_learner_that_never_rejoins_fails_reintegration(run_chaos):
    s = scenario_with("kill-one-learner", checks={"reintegration": {"enabled": True}})
    result = run_chaos(s, baseline=False)
    v = _verdict(result, "reintegration")
    assert v.status == "fail", v
    assert "learner-1" in v.summary and "never" in v.summary
    assert _verdict(result, "liveness").status == "pass"  # the others kept training: only this check fails


def test_corrupt_learner_without_validation_fails_safety(run_chaos):
    # A long corrupt window: a restarted learner can take many seconds to compile on a loaded machine.
    s = scenario_with("corrupt-learner", cluster={"syncer": {"validate_uploads": False}},
                      schedule=[{"fault": "corrupt", "mode": "nan", "targets": ["learner-1"], "at": 2, "duration": 25}])
    result = run_chaos(s, baseline=False)
    v = _verdict(result, "safety")
    assert v.status == "fail", v
    assert "non-finite" in v.summary or "nan" in v.summary.lower()


def _reference_run(run_chaos, algorithm: dict):
    # Fault-free, 600k tokens: the check compares the trainer with synchronous DiLoCo, not a fault's effect.
    s = scenario_with("kill-one-learner", schedule=[],
                      cluster={"token_budget": 600_000, "algorithm": algorithm},
                      checks={"liveness": {"enabled": False}, "reference": {"enabled": True, "tolerance": 0.05}})
    return run_chaos(s)


def test_reference_runs_synchronous_diloco_and_fails_a_trainer_that_does_not_train_like_it(run_chaos):
    # Whether the defaults pass is a quality claim (benchmarks/reference_parity.py, 5 seeds: +0.02% ± 0.08%):
    # at 600k tokens without emulated steps one decoupled run moves by ±0.05 with the machine's load.
    ok = _reference_run(run_chaos, {})
    v = _verdict(ok, "reference")
    assert v.status in ("pass", "fail") and v.evidence["reference_final_eval_loss"] > 0, v
    sync = scenario_with("kill-one-learner", cluster={"token_budget": 600_000}).cluster.sync_diloco_reference()
    assert ok.report["reference"]["config_hash"] == sync.config_hash() != ok.report["baseline"]["config_hash"]
    assert (ok.out_dir / "reference.json").exists()
    # Outer steps 1/70 of DiLoCo's: the global model barely moves, whatever the timing. The reference is cached.
    bad = _reference_run(run_chaos, {"outer_lr": 0.01})
    v = _verdict(bad, "reference")
    assert v.status == "fail", v
    assert bad.report["reference"]["cached"] and v.evidence["delta"] > 0.05
    assert bad.exit_code == 1
