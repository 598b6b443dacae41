"""The nightly rotation: every member of every rotated family runs within a week of nights (docs/ci-tiers.md)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from chaos.rotation import nights_to_cover, tonight
from tests.unit.test_tiers import marked_tests

WEEK = 7


def rotated_families() -> dict[str, tuple[int, int]]:
    """Each rotated family -> (its members, per_night): a test function marked chaos_rotate by node id (its
    parametrized members), or ``<module>::<family>`` for a module's tests that name one family."""
    families: dict[str, tuple[int, int]] = {}
    for node, marks in marked_tests(("integration", "chaos", "docker", "nightly")):
        rotate = [m for m in marks if m.name == "chaos_rotate"]
        if rotate:
            sizes = [len(list(m.args[1])) for m in marks if m.name == "parametrize"]
            family = rotate[0].kwargs.get("family")
            key = f"{node.split('::')[0]}::{family}" if family else node
            members, per_night = families.get(key, (0, int(rotate[0].kwargs["per_night"])))
            assert per_night == int(rotate[0].kwargs["per_night"]), f"{key}: one per_night for the whole family"
            families[key] = (members + (sizes[0] if sizes else 1), per_night)
    return families


def test_the_long_nightly_families_rotate() -> None:
    assert {n.split("::")[1] for n in rotated_families()} >= {
        "test_builtin_scenario",
        "test_builtin_scenario_at_four_times_the_budget",
        "test_parity_at_full_model_size",
        "container faults",
    }
    assert rotated_families()["tests/docker/test_compose.py::container faults"][0] == 4


@pytest.mark.parametrize("node", sorted(rotated_families()))
def test_every_member_runs_within_a_week(node: str) -> None:
    members, per_night = rotated_families()[node]
    assert nights_to_cover(members, per_night) <= WEEK, f"{node}: raise per_night so {members} members fit a week"
    ids = [f"m{i}" for i in range(members)]
    nights = [
        int((date(2026, 11, 28) + timedelta(days=d)).strftime("%Y%m%d")) for d in range(WEEK)
    ]  # over a month's end
    seen = {i for seed in nights for i in tonight(ids, per_night, seed)}
    assert seen == set(ids)


def test_a_night_replays_from_its_seed() -> None:
    ids = [f"m{i}" for i in range(14)]
    assert tonight(ids, 2, 20261205) == tonight(list(reversed(ids)), 2, 20261205)
    assert tonight(ids, 2, 20261205) != tonight(ids, 2, 20261206)
