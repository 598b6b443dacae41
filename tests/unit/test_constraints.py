"""constraints.txt (scripts/lock) pins every dependency pyproject.toml declares, at a version it allows."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

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


# Extras of a tier of their own (its own virtualenv, never the per-change install): pinned exactly in pyproject.toml
# itself, so scripts/lock (which installs the per-change extras) need not download them (torch: ~5 GB).
OWN_TIER_EXTRAS = {"torchft"}


def _project() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _declared() -> list[Requirement]:
    project = _project()
    reqs = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        reqs += [] if name in OWN_TIER_EXTRAS else extra
    return [Requirement(r) for r in reqs]


def test_an_own_tier_extra_is_pinned_exactly_in_pyproject() -> None:
    extras = _project()["optional-dependencies"]
    for name in OWN_TIER_EXTRAS:
        for r in map(Requirement, extras[name]):
            assert str(r.specifier).startswith("==") and "," not in str(r.specifier), f"{name}: {r} is not pinned"


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
