"""Where a test tier's time goes: a JUnit file summed per test folder (docs/ci-tiers.md).

    DILOCO_JUNIT_DIR=J scripts/test -p no:cacheprovider     # or scripts/test --quick ..., scripts/nightly
    .venv/bin/python -m benchmarks.tier_times J/*.xml [--slowest 3]

Each row is a folder's tests summed (doctests: one row, by package): how many, how many did not pass, the sum of
their durations and the slowest. Under parallel workers (``-n 2``) the sums are per-test times, which add up to
more than the wall time; the wall time is the script's ``tier:`` line.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import markdown_table


@dataclass
class FolderTime:
    """One folder's tests: (seconds, test) of each, and how many did not pass."""

    each: list[tuple[float, str]] = field(default_factory=list)
    not_passed: int = 0

    @property
    def tests(self) -> int:
        return len(self.each)

    @property
    def seconds(self) -> float:
        return sum(s for s, _ in self.each)


def folder_of(classname: str) -> str:
    """The row a JUnit ``classname`` is counted in: ``tests/<folder>`` or ``doctests (<package>)``.

    >>> folder_of("tests.property.test_search"), folder_of("tests.chaos.test_under_load.TestX")
    ('tests/property', 'tests/chaos')
    >>> folder_of("trainer.core.grace")
    'doctests (trainer)'
    """
    parts = classname.split(".")
    if parts[0] == "tests" and len(parts) > 2:
        return f"tests/{parts[1]}"
    return f"doctests ({parts[0]})"


def tier_times(*junits: str) -> dict[str, FolderTime]:
    """Per-folder times of JUnit XML documents (pytest's ``--junitxml``) taken together, folders in name order.

    >>> doc = '''<testsuites><testsuite>
    ... <testcase classname="tests.unit.test_a" name="test_x" time="1.5"/>
    ... <testcase classname="tests.unit.test_b" name="test_y" time="0.5"><failure message="no"/></testcase>
    ... <testcase classname="chaos.report" name="chaos.report.table" time="0.1"/>
    ... </testsuite></testsuites>'''
    >>> t = tier_times(doc)
    >>> list(t), t["tests/unit"].tests, t["tests/unit"].not_passed, t["tests/unit"].seconds
    (['doctests (chaos)', 'tests/unit'], 2, 1, 2.0)
    >>> tier_times(doc, doc)["tests/unit"].tests  # one file per phase of scripts/test
    4
    """
    out: dict[str, FolderTime] = {}
    for case in (c for junit in junits for c in ET.fromstring(junit).iter("testcase")):
        row = out.setdefault(folder_of(case.get("classname", "")), FolderTime())
        row.not_passed += any(case.find(tag) is not None for tag in ("failure", "error"))
        row.each.append((float(case.get("time", "0") or 0), f"{case.get('classname', '')}::{case.get('name', '')}"))
    return dict(sorted(out.items()))


def table(times: dict[str, FolderTime], slowest: int = 3) -> str:
    rows = [[name, t.tests, t.not_passed, f"{t.seconds / 60:.1f}",
             "; ".join(f"{test.rsplit('.', 1)[-1]} {s:.0f} s" for s, test in sorted(t.each, reverse=True)[:slowest])]
            for name, t in times.items()]
    total = sum(t.seconds for t in times.values())
    rows.append(["**sum**", sum(t.tests for t in times.values()), sum(t.not_passed for t in times.values()),
                 f"{total / 60:.1f}", ""])
    return markdown_table(["folder", "tests", "not passed", "minutes (summed)", "slowest"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("junit", type=Path, nargs="+", help="pytest's --junitxml files (scripts/test writes one per "
                    "phase with DILOCO_JUNIT_DIR=<dir>): their folders summed together")
    ap.add_argument("--slowest", type=int, default=3, help="name this many slowest tests per folder")
    args = ap.parse_args(argv)
    try:
        times = tier_times(*(path.read_text(encoding="utf-8") for path in args.junit))
    except (OSError, ET.ParseError) as err:
        print(f"error: cannot read {' '.join(map(str, args.junit))} as JUnit XML files: {err}", file=sys.stderr)
        return 2
    print(table(times, args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
