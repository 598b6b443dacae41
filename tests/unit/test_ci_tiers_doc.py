"""Docs are a manual: tier timings are rendered from benchmarks/results/tier_times.json, never typed into prose.

docs/ci-tiers.md's timing table is what ``benchmarks.costs.tier_times --render`` draws from the results file, and
README.md and every document under docs/ (manuals) hold no date or commit hash outside their generated sections
(issue 39, item 4; the benchmarks' tables: tests/unit/test_benchmark_docs.py; history: docs/decisions.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import rendered
from benchmarks.costs import tier_times

ROOT = Path(__file__).resolve().parents[2]
# The documents that are manuals: measurements only in generated sections.
MANUALS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def test_the_docs_show_the_recorded_tier_timings() -> None:
    doc = json.loads((ROOT / tier_times.RESULTS_PATH).read_text())
    assert list(doc["tiers"]) == list(tier_times.TIERS), "tier_times.json should hold one measurement per tier"
    for name, entry in doc["tiers"].items():
        missing = {"command", "commit", "finished", "whole_s", "tests", "not_passed"} - set(entry)
        assert not missing, f"{name}: {missing}"
    text = (ROOT / tier_times.DOC).read_text()
    assert tier_times.render(doc, text) == text, (
        "docs/ci-tiers.md is stale: .venv/bin/python -m benchmarks.costs.tier_times --render"
    )


@pytest.mark.parametrize("name", MANUALS)
def test_a_manual_has_no_date_or_commit_outside_its_generated_tables(name: str) -> None:
    text = rendered.outside((ROOT / name).read_text())
    found = DATE.findall(text) + COMMIT.findall(text)
    assert not found, (
        f"{name} quotes {found} in prose: measurements live in results JSON, rendered between markers"
    )


def test_the_check_sees_a_dated_paragraph_and_a_commit() -> None:
    """Negative control: the patterns catch what the old log had, and leave generated tables alone."""
    prose = "**whole 14.0 min** (2026-12-02 22:51, 294d943)"
    assert DATE.findall(prose) == ["2026-12-02"] and COMMIT.findall(prose) == ["294d943"]
    assert not COMMIT.findall("deadbeef facade 1234567 accepted")
    generated = f"a\n{rendered.begin('t', 'r.json', '`x`')}\n| 294d943 | 2026-12-02 |\n{rendered.end('t')}\nb"
    assert not DATE.findall(rendered.outside(generated)) and not COMMIT.findall(rendered.outside(generated))


def test_record_stores_a_tier_from_its_junit_files_and_log(tmp_path: Path) -> None:
    junit = (
        '<testsuites><testsuite><testcase classname="tests.unit.test_a" name="test_x" time="2.0"/>'
        '<testcase classname="tests.chaos.test_b" name="test_y" time="30.5"><failure message="no"/></testcase>'
        "</testsuite></testsuites>"
    )
    log = "tier: setup 40 s\n...\ntier: pytest-cpu 100 s\n\nreal\t2m31.500s\nuser\t4m0.000s\n"
    path = tmp_path / "tier_times.json"
    entry = tier_times.measurement(tier_times.tier_times(junit), log, "scripts/test", "a note")
    tier_times.record("nightly", {"stays": True}, path)
    tier_times.record("quick", entry, path)
    doc = json.loads(path.read_text())
    assert list(doc["tiers"]) == ["quick", "nightly"]  # the doc's order, the other tier kept
    got = doc["tiers"]["quick"]
    assert got["whole_s"] == 151.5 and got["parts_s"] == {"setup": 40, "pytest-cpu": 100}
    assert (got["tests"], got["not_passed"], got["command"], got["note"]) == (2, 1, "scripts/test", "a note")
    assert got["folders"]["tests/chaos"] == {
        "tests": 1,
        "not_passed": 1,
        "seconds": 30.5,
        "slowest": [[30.5, "tests.chaos.test_b::test_y"]],
    }
    assert "**2.5 min**" in tier_times.markdown({"tiers": {"quick": got}})


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("name", MANUALS)
def test_every_anchor_a_manual_links_to_exists(name: str) -> None:
    path = ROOT / name
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", path.read_text()):
        doc = (path.parent / target).resolve() if target else path
        headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", doc.read_text(), re.M)}
        if anchor not in headings:
            broken.append(f"{target or name}#{anchor}")
    assert not broken, f"{name} links to headings that do not exist: {broken}"
