"""What CI shows of a run: a JUnit file (one test case per check) and the report in the job summary.

JUnit readers (GitHub, GitLab, Jenkins, Buildkite) count ``<failure>`` and ``<error>`` apart, so a check that
*failed* is a ``<failure>`` and one that *could not decide* is an ``<error type="indeterminate">``: both turn the
job red, as exit codes 1 and 3 do, and a reader tells them apart. A run that could not be done (exit code 2) is
one ``<error type="error">`` case named ``run``. Every case carries its check's summary as the message and its
evidence, as JSON, in ``<system-out>``; the suite's properties say how to replay the run.

Example:
    >>> from chaos.checkers.base import Verdict
    >>> from chaos.run_report import RunReport
    >>> r = RunReport(scenario="kill-one-learner", status="fail", exit_code=1, run_dir="runs/k", seed=0,
    ...               config_hash="", started_at=0.0, wall_s=2.0, backend="local",
    ...               verdicts=[Verdict("liveness", "pass", "ok"), Verdict("parity", "fail", "too far"),
    ...                         Verdict("durability", "indeterminate", "no restart")])
    >>> xml = junit_xml(r)
    >>> '<failure message="too far" type="fail">' in xml, '<error message="no restart" type="indeterminate">' in xml
    (True, True)
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from chaos.formatting import finite
from chaos.report import render_markdown, replay_command
from chaos.run_report import RunReport

SUITE_PREFIX = "diloco-chaos"
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions: Markdown appended here shows on the run's page


def junit_xml(report: RunReport) -> str:
    """The report as a JUnit XML document: one ``<testcase>`` per check (or one named ``run`` if none ran)."""
    name = f"{SUITE_PREFIX}.{report.scenario or 'unnamed'}"
    cases = [_case(name, v.name, v.status, v.summary, v.evidence) for v in report.verdicts]
    if report.status == "error" or not report.verdicts:
        why = report.error or ("no check ran" if report.status != "error" else "the run could not be done")
        cases.append(_case(name, "run", "error" if report.status == "error" else report.status, why, {}))
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    # Deterministic mode's times are virtual: a JUnit time would read as the seconds CI spent.
    wall = f"{report.wall_s:.3f}" if finite(report.wall_s) and not report.simulated else "0"
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=wall,
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("status", report.status),
        ("exit_code", report.exit_code),
        ("seed", report.seed),
        ("backend", report.backend or "unknown"),
        ("run_dir", report.run_dir),
        ("config_hash", report.config_hash),
        ("replay", replay_command(report)),
        *((f"warning.{i}", w) for i, w in enumerate(report.warnings)),
    ):
        ET.SubElement(props, "property", name=key, value=str(value))
    suite.extend(cases)
    root = ET.Element(
        "testsuites",
        name=SUITE_PREFIX,
        tests=suite.get("tests", "0"),
        failures=str(failures),
        errors=str(errors),
        time=wall,
    )
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case(classname: str, name: str, status: str, summary: str, evidence: object) -> ET.Element:
    case = ET.Element("testcase", classname=classname, name=name, time="0")
    if status == "fail":
        ET.SubElement(case, "failure", message=summary, type="fail").text = summary
    elif status in ("indeterminate", "error"):
        ET.SubElement(case, "error", message=summary, type=status).text = summary
    elif status == "not_applicable":  # not run: the system under test cannot give the check its evidence
        ET.SubElement(case, "skipped", message=summary, type=status).text = summary
    shown = json.dumps(evidence, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    ET.SubElement(case, "system-out").text = f"{status.upper()}: {summary}\nevidence: {shown}"
    return case


def write_junit(report: RunReport, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(report), encoding="utf-8")
    return path


def append_step_summary(report: RunReport, env: dict[str, str] | None = None) -> Path | None:
    """Append the report's Markdown to ``$GITHUB_STEP_SUMMARY`` when it is set; returns the file (None: unset)."""
    target = (os.environ if env is None else env).get(STEP_SUMMARY_ENV)
    if not target:
        return None
    # The timeline picture is a file beside report.md, which a job summary cannot show: leave it out.
    md = "\n".join(line for line in render_markdown(report).splitlines() if not line.startswith("!["))
    with open(target, "a", encoding="utf-8") as f:
        f.write(md.rstrip("\n") + "\n\n")
    return Path(target)
