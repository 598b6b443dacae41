"""scripts/cluster-test's verdict on a run (benchmarks.costs.cluster_tier.judge): what counts as the cluster tier
passing a scenario, and its negative control."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.costs.cluster_tier import judge, main


def _report(**statuses: str) -> dict:
    return {
        "verdicts": [{"name": k, "status": v} for k, v in statuses.items()],
        "not_run": [],
        "faults": [{"fault_id": "f0", "kind": "kill", "injected": True}],
    }


def test_every_check_must_pass_on_the_cluster_parity_too() -> None:
    """Parity's band runs on the cluster (cluster-test's baselines), so an undecided parity is no pass."""
    assert judge("kill-and-rejoin", _report(liveness="pass", parity="pass")) == (True, "as expected")
    assert judge("kill-and-rejoin", _report(liveness="pass", parity="indeterminate")) == (
        False,
        "parity is indeterminate",
    )
    assert judge("kill-and-rejoin", _report(liveness="indeterminate", parity="pass")) == (
        False,
        "liveness is indeterminate",
    )
    assert judge("kill-and-rejoin", _report(liveness="pass", safety="fail")) == (False, "safety is fail")


def test_a_planned_fault_that_never_ran_fails_the_scenario() -> None:
    report = {**_report(liveness="pass"), "not_run": ["f1"]}
    assert judge("random-mix", report) == (False, "planned fault f1 did not run")


def test_the_negative_control_passes_only_when_its_checker_fails() -> None:
    assert judge("never-rejoins", _report(liveness="pass", reintegration="fail")) == (True, "as expected")
    assert judge("never-rejoins", _report(liveness="pass", reintegration="pass"))[0] is False
    # a negative control whose other checks fail is still judged by its own checker
    assert judge("never-rejoins", _report(liveness="fail", reintegration="fail")) == (True, "as expected")


def test_judging_appends_the_line_the_record_is_made_of(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report(liveness="pass", reintegration="fail")))
    lines = tmp_path / "results.jsonl"
    assert main(["judge", "never-rejoins", str(report), "--seconds", "187", "--append", str(lines)]) == 0
    assert main(["judge", "kill-and-rejoin", str(report), "--seconds", "74", "--append", str(lines)]) == 1
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [(r["name"], r["ok"], r["seconds"]) for r in rows] == [
        ("never-rejoins", True, 187.0),
        ("kill-and-rejoin", False, 74.0),
    ]
    assert main(["record", str(tmp_path), "--command", "scripts/cluster-test x", "--out-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "cluster_test.json").read_text())
    assert doc["command"] == "scripts/cluster-test x" and doc["results"]["all_ok"] is False
