"""What CI reads of a run: JUnit (read back with junitparser, as CI's readers do), the job summary, --json,
--version, "did you mean", and a closed stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml
from junitparser import TestCase as JUnitCase  # not TestCase here: pytest would try to collect it

from chaos.checkers.base import Verdict
from chaos.ci_output import append_step_summary, junit_xml, write_junit
from chaos.cli import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, main
from chaos.errors import ScenarioError
from chaos.run_report import RunReport
from chaos.scenario import builtin_scenarios, parse_scenario, resolve


def _report(**kw: object) -> RunReport:
    base = dict(
        scenario="kill-one-learner",
        status="fail",
        exit_code=1,
        run_dir="runs/k",
        seed=3,
        config_hash="c",
        started_at=1.7e9,
        wall_s=12.5,
        backend="local",
        verdicts=[
            Verdict("liveness", "pass", "merges never stopped", {"merges": 40}),
            Verdict("parity", "fail", "final loss too far", {"delta": 0.2}),
            Verdict("durability", "indeterminate", "no syncer restart to judge", {}),
        ],
    )
    return RunReport.model_validate({**base, **kw})


def _cases(path: Path) -> dict[str, JUnitCase]:
    (suite,) = list(JUnitXml.fromfile(str(path)))
    return {case.name: case for case in suite}


def test_junit_has_one_case_per_check_and_tells_failure_from_indeterminate(tmp_path: Path) -> None:
    cases = _cases(write_junit(_report(), tmp_path / "j.xml"))
    assert list(cases) == ["liveness", "parity", "durability"]
    assert cases["liveness"].is_passed
    (fail,) = cases["parity"].result
    assert isinstance(fail, Failure) and fail.message == "final loss too far" and fail.type == "fail"
    (undecided,) = cases["durability"].result
    assert isinstance(undecided, Error) and undecided.type == "indeterminate"
    assert '"delta": 0.2' in cases["parity"].system_out  # the evidence travels with the case
    (suite,) = list(JUnitXml.fromfile(str(tmp_path / "j.xml")))
    assert (suite.tests, suite.failures, suite.errors) == (3, 1, 1)
    props = {p.name: p.value for p in suite.properties()}
    assert props["replay"] == "diloco-chaos replay runs/k" and props["seed"] == "3"


def test_junit_of_a_run_that_could_not_be_done_is_one_error(tmp_path: Path) -> None:
    r = _report(status="error", exit_code=2, verdicts=[], error="bring-up failed: port in use")
    cases = _cases(write_junit(r, tmp_path / "j.xml"))
    (err,) = cases["run"].result
    assert list(cases) == ["run"] and isinstance(err, Error) and err.type == "error"
    assert "port in use" in err.message


def test_junit_time_of_a_simulated_run_is_not_its_virtual_time() -> None:
    assert 'time="12.500"' in junit_xml(_report())
    assert 'time="12.500"' not in junit_xml(_report(backend="sim"))


def test_step_summary_only_when_github_asks(tmp_path: Path) -> None:
    assert append_step_summary(_report(), env={}) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert append_step_summary(_report(), env={"GITHUB_STEP_SUMMARY": str(target)}) == target
    text = target.read_text()
    assert text.startswith("earlier step\n# Chaos run: kill-one-learner") and "## Result: FAIL" in text
    assert "![" not in text  # no picture the summary cannot show


def test_a_simulated_run_gives_ci_json_junit_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end through the CLI: stdout is the report's JSON and nothing else; the JUnit cases are the
    report's verdicts; a goodput minimum it cannot meet fails exactly that case."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    code = main(
        [
            "simulate",
            "kill-one-learner",
            "--out",
            str(tmp_path / "run"),
            "--junit",
            str(tmp_path / "j.xml"),
            "--json",
            "--set",
            "checks.goodput.min=0.99",
        ]
    )
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == EXIT_FAIL and report["status"] == "fail" and report["backend"] == "sim"
    assert report == json.loads((tmp_path / "run" / "report.json").read_text())
    assert "FAIL" in err and "junit:" in err  # people's text went to stderr
    cases = _cases(tmp_path / "j.xml")
    assert list(cases) == [v["name"] for v in report["verdicts"]]
    failed = {name for name, c in cases.items() if any(isinstance(r, Failure) for r in c.result)}
    assert failed == {v["name"] for v in report["verdicts"] if v["status"] == "fail"} == {"goodput"}
    assert "**simulated**" in (tmp_path / "summary.md").read_text()


def test_list_and_validate_as_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["list", "--json"]) == EXIT_PASS
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == list(builtin_scenarios())
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nschedule: 3\n")
    assert main(["validate", "kill-and-rejoin", str(bad), "--json", str(tmp_path / "v.json")]) == EXIT_ERROR
    rows = json.loads((tmp_path / "v.json").read_text())
    assert [r["ok"] for r in rows] == [True, False] and "schedule" in rows[1]["error"]
    assert "kill-and-rejoin: ok" in capsys.readouterr().out  # with a PATH, stdout keeps the people's text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("diloco-chaos ")


def test_did_you_mean_for_scenario_names_and_fields() -> None:
    with pytest.raises(ScenarioError, match=r"did you mean kill-and-rejoin\?"):
        resolve("kill-and-rejion")
    with pytest.raises(ScenarioError, match=r"schedule\.0\.restrat: .*did you mean restart\?"):
        parse_scenario(
            {
                "name": "x",
                "schedule": [{"fault": "kill", "targets": ["learner-0"], "at": 1, "duration": 1, "restrat": True}],
            }
        )
    with pytest.raises(ScenarioError, match=r"cluster\.algorithm\.min_quorom: .*did you mean min_quorum\?"):
        parse_scenario({"name": "x", "cluster": {"algorithm": {"min_quorom": 2}}})
    with pytest.raises(ScenarioError) as far:
        parse_scenario({"name": "x", "zzzzzz": 1})
    assert "did you mean" not in str(far.value)  # nothing close: no guess


def test_a_closed_stdout_ends_quietly() -> None:
    """`diloco-chaos list | head -0`: the reader is gone before the first line; no traceback, exit code 2."""
    r, w = os.pipe()
    os.close(r)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "chaos.cli", "list"], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(w)
    assert "Traceback" not in done.stderr and done.returncode == EXIT_ERROR, done.stderr
