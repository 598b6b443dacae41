"""One word, one meaning (docs/design.md, "Words"): in code, a bare ``schedule`` is a fault schedule.

A fragment schedule (trainer/core/fragment_schedule.py) is always named as one: every parameter annotated
``FragmentSchedule`` and every name bound to ``FragmentSchedule(...)`` says ``fragment`` in its name. Read with
ast from the source, without importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "chaos", "faults", "benchmarks")


def unqualified_fragment_schedules(source: str, filename: str = "<source>") -> list[str]:
    """``file:line name`` for each name that holds a FragmentSchedule without saying ``fragment``."""
    found = []

    def check(name: str, line: int) -> None:
        if "fragment" not in name.lower():
            found.append(f"{filename}:{line} {name}")

    for node in ast.walk(ast.parse(source, filename)):
        if (
            isinstance(node, ast.arg)
            and node.annotation is not None
            and "FragmentSchedule" in ast.unparse(node.annotation)
        ):
            check(node.arg, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("FragmentSchedule"):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        check(t.id if isinstance(t, ast.Name) else t.attr, node.lineno)
    return sorted(found)


def test_every_fragment_schedule_is_named_as_one() -> None:
    found = [
        hit
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for hit in unqualified_fragment_schedules(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, f"name these fragment_schedule (a bare `schedule` is a fault schedule): {found}"


def test_the_reader_finds_an_unqualified_one() -> None:
    """Negative control: both ways of holding one under a bare name are found; qualified names are not."""
    src = (
        "def f(schedule: FragmentSchedule, fragment_schedule: FragmentSchedule) -> None:\n"
        "    sch = FragmentSchedule(2, 4, 1, staggered=True)\n"
        "    fragment_schedule = core.FragmentSchedule(2, 4, 1)\n"
    )
    assert unqualified_fragment_schedules(src) == ["<source>:1 schedule", "<source>:2 sch"]
