"""chaos.run_report: report.json is the RunReport model, read back as written; old layouts read, others are refused."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from chaos.history import NotRunPhase, Phase, TeardownPhase, parse_record
from chaos.report import render_markdown
from chaos.run_report import REPORT_SCHEMA_VERSION, RunReport

# report.json as a real run wrote it before the report was typed (a deterministic kill-one-learner run, trimmed),
# with the keys of every producer: a simulated baseline, a real run's teardown, a measured false-alarm rate; brought
# to schema 2 (backend added, metrics.goodput_tokens renamed uploads_merged).
OLD: dict[str, Any] = {
    "schema_version": 2,
    "scenario": "kill-one-learner",
    "description": "SIGKILL one of three learners mid-run and never restart it.\n",
    "status": "fail",
    "exit_code": 1,
    "run_dir": "runs/sim/kill-one-learner",
    "seed": 0,
    "config_hash": "f8d05640b069dc5e",
    "started_at": 1700000000.0,
    "wall_s": 92.703,
    "backend": "sim",
    "verdicts": [
        {"name": "liveness", "status": "pass", "summary": "575 merges", "evidence": {"merges": 575}},
        {
            "name": "reintegration",
            "status": "fail",
            "summary": "learner-1 never came back",
            "evidence": {"learners": [{"learner": "learner-1", "first_upload_after_s": None}], "bound": [1, 2.5]},
        },
    ],
    "warnings": ["outside the regime: 1.2 of 3 learners"],
    "plan": [
        {
            "fault_id": "f0",
            "kind": "kill",
            "targets": ["learner-1"],
            "at": 3.0,
            "at_merge": None,
            "duration": 5.0,
            "params": {"restart": False},
        },
        {
            "fault_id": "f1",
            "kind": "pause",
            "targets": ["learner-2"],
            "at": None,
            "at_merge": 40,
            "duration": 2.0,
            "params": {},
        },
    ],
    "faults": [
        {
            "fault_id": "f0",
            "kind": "kill",
            "targets": ["learner-1"],
            "start_s": 3.0,
            "end_s": 8.0,
            "injected": True,
            "healed": True,
            "params": {"restart": False},
        }
    ],
    "not_run": ["f1"],
    "baseline": {"final_eval_loss": 2.0109243847802283, "simulated": True},
    "reference": None,
    "parity_false_alarm": {
        "alarms": 0,
        "runs": 10,
        "low": 0.0,
        "high": 0.2775401687666166,
        "tolerance": 0.05,
        "under_load": True,
        "same_cluster": True,
        "measured": "2026-12-02T08:33:30+00:00",
        "text": "0 of 10 fault-free runs outside the band by more than ±0.05",
    },
    "metrics": {
        "final_eval_loss": 2.013375452104956,
        "final_eval_is_final": True,
        "loss_floor": 2.0,
        "gap_to_floor": 0.013375452104956054,
        "merges": 575,
        "tokens_total": 2411520,
        "trained_tokens": 2420736,
        "trained_tokens_merged": 2250752,
        "contribution_tokens_uploaded": 7233536,
        "contribution_tokens_merged": 7003008,
        "learner_steps": 2311,
        "uploads_merged": 1.0,
        "rejections": {"non_finite": 2},
        "rounds_merged": 575,
        "participants_per_merge": 2.034782608695652,
        "late_carried": 0,
        "wall_s": 92.7,
    },
    "teardown": {
        "proxies_left": ["chaos-learner-0"],
        "processes_left": [],
        "healed_on_teardown": False,
        "exit_codes": {"learner-0": 0, "learner-1": -9, "syncer": None},
        "problems": [],
    },
}


def test_an_old_layout_report_reads_and_writes_back_the_same_json(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(OLD, indent=2))
    report = RunReport.read(path)
    assert report.teardown.exit_codes["learner-1"] == -9 and report.not_run == ["f1"]
    assert report.plan[1].at_merge == 40 and report.baseline is not None and report.baseline.simulated
    assert report.to_json() == path.read_text()  # same keys, same order, same values: old readers still work


def test_a_report_round_trips_through_report_json(tmp_path: Path) -> None:
    report = RunReport.model_validate(OLD)
    report.write(tmp_path / "report.json")
    assert RunReport.read(tmp_path / "report.json") == report


def test_nan_stays_nan_as_json_dumps_writes_it(tmp_path: Path) -> None:
    tree = copy.deepcopy(OLD)
    tree["metrics"]["final_eval_loss"] = math.nan
    tree["verdicts"][0]["evidence"]["gap_s"] = math.inf
    text = RunReport.model_validate(tree).to_json()
    assert text == json.dumps(tree, indent=2) and '"final_eval_loss": NaN' in text
    (tmp_path / "report.json").write_text(text)
    assert math.isnan(RunReport.read(tmp_path / "report.json").metrics.final_eval_loss)


def test_records_that_producers_fill_differently_keep_each_producers_keys() -> None:
    tree = {
        **OLD,
        "teardown": {},
        "baseline": {
            "seed": 0,
            "final_eval_loss": 2.5,
            "loss_floor": None,
            "run_dir": "cache/k",
            "cached": True,
            "config_hash": "k",
            "band": {"seeds": [0, 1], "losses": [2.5, 2.6], "floors": [2.0, 2.1], "excess": [0.5, 0.5]},
            "runs": [
                {
                    "seed": 1,
                    "final_eval_loss": 2.6,
                    "loss_floor": 2.1,
                    "run_dir": "cache/j",
                    "cached": False,
                    "config_hash": "j",
                }
            ],
        },
        "parity_false_alarm": {"text": "not measured here"},
    }
    dumped = RunReport.model_validate(tree).model_dump(mode="json")
    assert dumped == tree and "error" not in dumped


def test_another_schema_version_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match=r"schema_version\n.*schema_version 1 is not 2"):
        RunReport.model_validate({**OLD, "schema_version": 1})
    assert REPORT_SCHEMA_VERSION == 2


@pytest.mark.parametrize("field", ["scenario", "status", "seed", "wall_s"])
def test_a_missing_field_is_refused_by_name(field: str) -> None:
    tree = {k: v for k, v in OLD.items() if k != field}
    with pytest.raises(ValidationError, match=rf"{field}\n\s+Field required"):
        RunReport.model_validate(tree)


def test_a_wrong_record_is_refused_with_its_path() -> None:
    tree = copy.deepcopy(OLD)
    tree["teardown"]["proxies_left"] = "chaos-learner-0"
    with pytest.raises(ValidationError, match=r"teardown\.proxies_left"):
        RunReport.model_validate(tree)


def test_report_md_renders_from_the_typed_report(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps(OLD))
    md = render_markdown(RunReport.read(tmp_path / "report.json"))
    assert "## Result: FAIL" in md and "1 pass, 1 fail (exit code 1)" in md
    assert "> **Warning:** outside the regime: 1.2 of 3 learners" in md
    assert "| f0 | kill | learner-1 | 3.0 | 8.0 | restart=false |" in md
    assert "- `f1`: pause learner-2 at merge 40" in md
    assert '"first_upload_after_s": null' in md.split("### Why `reintegration` is FAIL", 1)[1]
    assert "| final eval loss | 2.013 |" in md and "| rejections | non_finite: 2 |" in md
    assert "2.011 (delta +0.002, +0.1%)" in md and "measured 2026-12-02" not in md
    assert "0 of 10 fault-free runs outside the band by more than ±0.05, 2026-12-02T08:33:30+00:00" in md
    assert "**Not clean:**" in md and "- proxies left: chaos-learner-0" in md


def test_the_teardown_and_not_run_phases_are_typed_in_the_history_with_the_same_lines() -> None:
    old_lines = [
        '{"ts":1.0,"source":"controller","kind":"phase","name":"not_run","detail":{"faults":["f1"]}}',
        '{"ts":2.0,"source":"controller","kind":"phase","name":"teardown","detail":{"proxies_left":[],'
        '"processes_left":[],"healed_on_teardown":false,"simulated":true}}',
        '{"ts":0.5,"source":"controller","kind":"phase","name":"steady","detail":{"merges":1}}',
    ]
    not_run, teardown, steady = (parse_record(line) for line in old_lines)
    assert isinstance(not_run, NotRunPhase) and not_run.detail.faults == ["f1"]
    assert isinstance(teardown, TeardownPhase) and teardown.detail.simulated and teardown.detail.exit_codes == {}
    assert type(steady) is Phase and steady.detail == {"merges": 1}
    assert [r.model_dump_json() for r in (not_run, teardown, steady)] == old_lines
