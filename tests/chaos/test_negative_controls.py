"""Negative controls (chaos.negative_controls): deliberately wrong set-ups that the matching checker must catch.

A checker that cannot fail proves nothing. Each case breaks one thing on
purpose and asserts that exactly the checker watching it reports ``fail``.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from chaos.negative_controls import CONTROLS, reference_scenario
from chaos.scenario import Goodput, scenario_with

pytestmark = pytest.mark.chaos
CONTROL = {c.name: c for c in CONTROLS}


def _verdict(result, name):
    return next(v for v in result.verdicts if v.name == name)


def _run(run_chaos, name):
    c = CONTROL[name]
    s = c.scenario()
    result = run_chaos(s, baseline=c.baseline)
    v = _verdict(result, c.must_fail)
    assert v.status == "fail", v
    assert result.exit_code == 1
    return s, result, v


def _the_run_announced_its_metrics_and_the_controller_stopped_serving(run_dir: Path) -> None:
    """Every process announced its /metrics (trainer.telemetry), the controller too; the controller's server
    stopped with the run (a port reused since by someone else would not serve our fault metrics)."""
    targets = {p.stem: json.loads(p.read_text())[0] for p in (run_dir / "metrics").glob("*.json")}
    assert {"controller", "syncer", "learner-0", "learner-1", "learner-2"} <= set(targets), targets
    assert targets["controller"]["labels"]["role"] == "controller"
    try:
        body = urllib.request.urlopen(f"http://{targets['controller']['targets'][0]}/metrics", timeout=3).read()
    except OSError:
        return
    assert b"diloco_fault_ops" not in body


def test_every_control_is_run_here():
    here = {"quorum-of-all", "never-rejoins", "corrupt-unvalidated", "outer-lr-1/70"}
    assert here == set(CONTROL), "run each negative control in this file"


@pytest.mark.chaos_nightly  # per change: in deterministic mode (tests/property/test_scenarios_deterministic.py)
def test_quorum_of_all_learners_stalls_merges_and_liveness_fails(run_chaos):
    s, result, v = _run(run_chaos, "quorum-of-all")
    assert v.evidence["longest_gap_while_reachable_s"] > v.evidence["max_gap_s"] > 0
    # The learners trained on while nothing merged: the goodput check's default bound catches that too
    # (6.0–6.7% of trained tokens merged in three nightly runs, 2026-12-02/03; the bound is 10%).
    g = _verdict(result, "goodput")
    assert g.status == "fail" and g.evidence["min"] == Goodput().min, g


@pytest.mark.chaos_nightly  # per change: in deterministic mode (tests/property/test_scenarios_deterministic.py)
def test_learner_that_never_rejoins_fails_reintegration(run_chaos):
    _, result, v = _run(run_chaos, "never-rejoins")
    assert "learner-1" in v.summary and "never" in v.summary
    assert _verdict(result, "liveness").status == "pass"  # the others kept training: only this check fails


@pytest.mark.chaos_nightly  # per change: in deterministic mode (tests/property/test_scenarios_deterministic.py)
def test_corrupt_learner_without_validation_fails_safety(run_chaos):
    _, _, v = _run(run_chaos, "corrupt-unvalidated")
    assert "non-finite" in v.summary or "nan" in v.summary.lower()


@pytest.mark.covers("reference")
def test_reference_runs_synchronous_diloco_and_fails_a_trainer_that_does_not_train_like_it(run_chaos):
    # Whether the defaults pass is a quality claim (benchmarks/claims/reference_parity.py, 5 seeds: +0.02% ± 0.08%):
    # at 600k tokens without emulated steps one decoupled run moves by ±0.05 with the machine's load.
    ok = run_chaos(reference_scenario({}))
    v = _verdict(ok, "reference")
    assert v.status in ("pass", "fail") and v.evidence["reference_final_eval_loss"] > 0, v
    sync = scenario_with("kill-one-learner", cluster={"token_budget": 600_000}).cluster.sync_diloco_reference()
    assert ok.report.reference.config_hash == sync.config_hash() != ok.report.config_hash
    assert (
        ok.report.baseline is None and not (ok.out_dir / "baseline.json").exists()
    )  # parity off: no baseline run
    assert (ok.out_dir / "reference.json").exists()
    _the_run_announced_its_metrics_and_the_controller_stopped_serving(ok.out_dir)
    # Outer steps 1/70 of DiLoCo's: the global model barely moves, whatever the timing. The reference is cached.
    _, bad, v = _run(run_chaos, "outer-lr-1/70")
    assert bad.report.reference.cached and v.evidence["delta"] > 0.05
