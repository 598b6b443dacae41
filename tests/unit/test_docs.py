"""README.md is a front door: small, with the two commands, and every document reachable from it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def links(path: Path) -> set[Path]:
    return {
        (path.parent / target).resolve()
        for target in LINK.findall(path.read_text())
        if not target.startswith(("http://", "https://"))
    }


def test_the_readme_is_at_most_8_kb_and_names_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 8 * 1024, f"README.md is {len(text.encode())} bytes: move detail into docs/"
    assert "scripts/main" in text and "scripts/test" in text


def test_every_document_is_linked_from_the_readme() -> None:
    docs = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    missing = sorted(p.name for p in docs - links(README))
    assert not missing, f"docs not linked from README.md's 'Where next': {missing}"


def test_every_local_link_points_to_a_file_that_exists() -> None:
    broken = [
        f"{p.relative_to(ROOT)} -> {t.relative_to(ROOT) if t.is_relative_to(ROOT) else t}"
        for p in [README, *sorted((ROOT / "docs").glob("*.md"))]
        for t in links(p)
        if not t.exists()
    ]
    assert not broken, f"broken links: {broken}"
