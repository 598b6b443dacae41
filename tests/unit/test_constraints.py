"""constraints.txt (scripts/lock) pins every dependency pyproject.toml declares, at a version it allows."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _pins(text: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def test_every_declared_dependency_is_pinned_at_an_allowed_version() -> None:
    pins = _pins((REPO / "constraints.txt").read_text())
    problems = []
    for req in _declared():
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req.name} is not in constraints.txt")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name}=={pinned} does not satisfy pyproject's {req}")
    assert not problems, "; ".join(problems) + " (run scripts/lock)"


def test_a_missing_pin_is_caught() -> None:
    """Negative control: the check above fails when a declared dependency is left out."""
    pins = _pins("pytest==9.2.0\n")
    assert any(canonicalize_name(r.name) not in pins for r in _declared())
