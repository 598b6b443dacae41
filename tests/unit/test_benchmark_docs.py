"""The benchmarks' tables in the docs are what their results files render to (benchmarks/doc_tables.py).

A re-run benchmark writes its JSON; ``.venv/bin/python -m benchmarks.doc_tables`` redraws the docs from it. This
fails when a doc was edited by hand inside a generated section, or its JSON moved on without a redraw (issue 39,
item 4). The docs' prose holds no date or commit (tests/unit/test_ci_tiers_doc.py, ``MANUALS``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import doc_tables, rendered

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", doc_tables.docs())
def test_a_doc_shows_its_benchmarks_recorded_tables(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert doc_tables.render(doc, text) == text, f"{doc} is stale: .venv/bin/python -m benchmarks.doc_tables"


@pytest.mark.parametrize("doc,section,results", doc_tables.SECTIONS)
def test_every_section_has_its_markers_and_a_complete_results_file(doc: str, section: str, results: str) -> None:
    assert rendered.pattern(section).search((ROOT / doc).read_text()), f"{doc} has no {section} section"
    result = json.loads((ROOT / doc_tables.RESULTS / results).read_text())
    assert {"command", "finished", "machine", "table"} <= set(result), results


def test_a_hand_edit_inside_a_section_is_seen(tmp_path: Path) -> None:
    """Negative control: a number retyped in a generated table no longer matches its JSON."""
    doc, section, _ = doc_tables.SECTIONS[0]
    text = (ROOT / doc).read_text()
    body = rendered.pattern(section).search(text).group(0)  # type: ignore[union-attr]
    edited = text.replace(body, body.replace("|", "| 9", 1))
    assert doc_tables.render(doc, edited) == text != edited
