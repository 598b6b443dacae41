"""The per-change tier still runs every fault kind and every check for real (docs/ci-tiers.md).

Tests that inject a fault kind into real processes, the real Toxiproxy or real containers, or that judge a whole
real run with a check, say so with ``@pytest.mark.covers("kill", "liveness", ...)``. Moving such a test to the
nightly tier (marker ``chaos_nightly``) is fine as long as another per-change test still covers what it covered: this
test reads the markers of every test module, without running anything, and names what would be lost.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaos.checkers import CHECKERS
from faults.kinds import FAULT_KINDS

TESTS = Path(__file__).resolve().parents[1]
REAL = ("integration", "chaos", "docker")  # the folders whose tests touch real processes, proxies or containers
# Each slow folder's marker: the tiers select by marker (scripts/test), the plugin's markers are namespaced.
FOLDER_MARKERS = {
    "integration": "integration",
    "chaos": "chaos",
    "docker": "chaos_docker",
    "nightly": "chaos_nightly",
}
REAL_MARKERS = {FOLDER_MARKERS[f] for f in REAL}


def _marks(obj: Any) -> list[Any]:
    marks = getattr(obj, "pytestmark", [])
    return list(marks) if isinstance(marks, list) else [marks]


def marked_tests(folders: tuple[str, ...] = REAL) -> Iterator[tuple[str, list[Any]]]:
    """(node id, every mark: the module's and the function's) for each test function under ``folders``."""
    for folder in folders:
        for path in sorted((TESTS / folder).glob("test_*.py")):
            module = importlib.import_module(f"tests.{folder}.{path.stem}")
            for name, fn in vars(module).items():
                if name.startswith("test_") and callable(fn):
                    yield f"tests/{folder}/{path.name}::{name}", _marks(module) + _marks(fn)


def coverage(nightly: bool) -> dict[str, list[str]]:
    """What each fault kind and check is covered by, in the per-change tier (or, with ``nightly``, in either)."""
    covered: dict[str, list[str]] = {}
    for node, marks in marked_tests():
        if not nightly and any(m.name == "chaos_nightly" for m in marks):
            continue
        for m in marks:
            if m.name == "covers":
                for what in m.args:
                    covered.setdefault(what, []).append(node)
    return covered


def test_every_fault_kind_and_check_runs_for_real_per_change() -> None:
    covered = coverage(nightly=False)
    missing = sorted((set(FAULT_KINDS) | set(CHECKERS)) - set(covered))
    assert not missing, (
        f"no per-change test runs {missing} against real processes, Toxiproxy or containers: "
        "keep one such test out of the nightly tier, marked @pytest.mark.covers(...)"
    )


def test_covers_names_only_real_fault_kinds_and_checks() -> None:
    unknown = sorted(set(coverage(nightly=True)) - set(FAULT_KINDS) - set(CHECKERS))
    assert not unknown, f"@pytest.mark.covers names {unknown}: neither a fault kind nor a check"


def test_the_reader_sees_nightly_marks_as_the_tiers_do() -> None:
    """Negative control: a test only in the nightly tier does not count for the per-change tier."""
    everything, per_change = coverage(nightly=True), coverage(nightly=False)
    nightly_only = {n for nodes in everything.values() for n in nodes} - {
        n for nodes in per_change.values() for n in nodes
    }
    assert nightly_only, "no covering test is in the nightly tier: this reader cannot be shown to filter"
    assert all(
        any(m.name == "chaos_nightly" for m in marks) for node, marks in marked_tests() if node in nightly_only
    )


def test_container_tests_live_in_one_module() -> None:
    """scripts/test's parallel workers keep a module on one worker (``--dist loadfile``); the container tests share
    one Docker engine and the compose project's names, so they must stay in one module."""
    modules = {
        node.split("::")[0] for node, marks in marked_tests() if any(m.name == "chaos_docker" for m in marks)
    }
    assert len(modules) == 1, f"container tests in {sorted(modules)}: keep them in one module (see scripts/test)"


def test_folders_and_markers_match() -> None:
    """A module under tests/<folder>/ for real parts carries that folder's marker (the tiers select by marker), and
    the fast folders carry none of the real parts' markers at module level."""
    wrong = []
    for folder in (*FOLDER_MARKERS, "unit", "property", "mutants"):
        for path in sorted((TESTS / folder).glob("test_*.py")):
            names = {m.name for m in _marks(importlib.import_module(f"tests.{folder}.{path.stem}"))}
            if folder in FOLDER_MARKERS and FOLDER_MARKERS[folder] not in names:
                wrong.append(f"tests/{folder}/{path.name} lacks pytestmark {FOLDER_MARKERS[folder]}")
            if folder not in FOLDER_MARKERS and names & REAL_MARKERS:
                wrong.append(f"tests/{folder}/{path.name} is marked {sorted(names)}: move it to that folder")
    assert not wrong, wrong


def test_every_real_test_the_profile_sizes_up_runs_again_at_night() -> None:
    """scripts/nightly skips the per-change real-process tests except those marked ``nightly_sized``: a property
    test (Hypothesis) among them takes the nightly profile's examples, so it must carry the marker."""
    unmarked = [
        node
        for node, marks in marked_tests()
        if _is_property_test(node) and not {m.name for m in marks} & {"nightly_sized", "chaos_nightly"}
    ]
    assert not unmarked, f"mark {unmarked} @pytest.mark.nightly_sized: the nightly runs it bigger"
    assert "chaos_nightly or nightly_sized or not ($REAL)" in (TESTS.parent / "scripts" / "nightly").read_text()


def _is_property_test(node: str) -> bool:
    path, name = node.split("::")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return bool(getattr(getattr(module, name), "is_hypothesis_test", False))


def test_the_property_test_reader_sees_hypothesis_tests() -> None:
    """Negative control: the reader above finds the hostile-protocol property test, and not a plain test."""
    assert _is_property_test(
        "tests/integration/test_hostile_protocol.py::test_generated_hostile_traffic_breaks_no_invariant"
    )
    assert not _is_property_test(
        "tests/chaos/test_interrupt.py::test_interrupt_mid_fault_heals_and_stops_everything"
    )


def test_the_nightly_keeps_the_plugins_longest_first_order() -> None:
    """xdist's loadfile reorders files by their test count unless told not to; the one-test full-size files must
    start first, on both workers (tests/nightly/test_full_size_*.py)."""
    nightly = (TESTS.parent / "scripts" / "nightly").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in nightly
