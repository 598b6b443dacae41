"""Where a test tier's time goes, recorded and rendered (docs/ci-tiers.md, "Measuring a tier").

    DILOCO_JUNIT_DIR=J scripts/test -p no:cacheprovider     # or scripts/test --quick ..., scripts/nightly
    .venv/bin/python -m benchmarks.costs.tier_times J/*.xml [--slowest 3]          # print the per-folder table
    .venv/bin/python -m benchmarks.costs.tier_times J/*.xml --log J/log --record per-change   # into the results file
    .venv/bin/python -m benchmarks.costs.tier_times --log J/log --record main    # the main job: no tests, its parts
    .venv/bin/python -m benchmarks.costs.tier_times --render     # draw benchmarks/results/tier_times.json into the doc
    .venv/bin/python -m benchmarks.costs.tier_times --check      # exit 1 if docs/ci-tiers.md is not what it renders to

Each row is a folder's tests summed (doctests: one row, by package): how many, how many did not pass, the sum of
their durations and the slowest. Under parallel workers (``-n 2``) the sums are per-test times, which add up to
more than the wall time; the wall time is the ``real`` line of ``time`` in the tier's log (or the nightly's
"finished … in M min S s" line), its parts the script's ``tier: <part> <seconds> s`` lines.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import rendered
from benchmarks.common import machine, markdown_table

RESULTS_PATH = Path("benchmarks/results/tier_times.json")
DOC = Path("docs/ci-tiers.md")
SECTION = "tier-times"
RENDER_COMMAND = "`.venv/bin/python -m benchmarks.costs.tier_times --render`"
# The tiers in the order the doc shows them: how each is measured (the command --record stores unless told), and
# its bar in minutes on the reference 2-core machine (docs/ci-tiers.md, "Sizing").
TIERS: dict[str, dict[str, Any]] = {
    "quick": {"measure": "( time DILOCO_JUNIT_DIR=J scripts/test --quick ) >J/log 2>&1", "bar_min": 3},
    "per-change": {
        "measure": "git clone … && ( time CI=true DILOCO_JUNIT_DIR=J .ci/run ) >J/log 2>&1",
        "bar_min": 15,
    },
    "nightly": {"measure": "git clone … && ( time CI=true scripts/nightly ) >J/log 2>&1", "bar_min": 60},
    # The main job (no tests: its parts are scripts/main's `tier:` lines), from a fresh clone with no images.
    "main": {"measure": "git clone … && ( time scripts/main ) >J/log 2>&1", "bar_min": 8},
    # The cluster tier (weekly: .github/workflows/cluster.yml), from a fresh clone with Go's module and build
    # caches empty: Kubernetes, etcd, CoreDNS and Chaos Mesh built from the module proxy, then every scenario, its
    # parity band included. Its parts are install-cluster's and cluster-test's `tier:` lines.
    "cluster": {
        "measure": "git clone … && ( time sh -c 'scripts/install-cluster && scripts/cluster-test --record "
        "kill-and-rejoin partition-one throttle-all random-mix never-rejoins' ) >J/log 2>&1 "
        "(GOMODCACHE, GOCACHE empty)",
        "bar_min": 60,
    },
    # The same on the same machine right after it (scripts/teardown-cluster between): binaries, the tools image's
    # root filesystem and the parity band cached under .tools/cluster.
    "cluster-warm": {
        "measure": "( time sh -c 'scripts/install-cluster && scripts/cluster-test --record kill-and-rejoin "
        "partition-one throttle-all random-mix never-rejoins' ) >J/log 2>&1 (after the cold run)",
        "bar_min": 60,
    },
    # The torchft tier (weekly: .github/workflows/torchft.yml), from a fresh clone with pip's cache empty: torchft and
    # torch installed, every findings run, the planted defects. Its parts are scripts/torchft-test's `tier:` lines.
    "torchft": {
        "measure": "git clone … && ( time scripts/torchft-test --record ) >J/log 2>&1 (pip's cache empty)",
        "bar_min": 60,
    },
}


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
        row.each.append(
            (float(case.get("time", "0") or 0), f"{case.get('classname', '')}::{case.get('name', '')}")
        )
    return dict(sorted(out.items()))


def table(times: dict[str, FolderTime], slowest: int = 3) -> str:
    rows = [
        [
            name,
            t.tests,
            t.not_passed,
            f"{t.seconds / 60:.1f}",
            "; ".join(
                f"{test.rsplit('.', 1)[-1]} {s:.0f} s" for s, test in sorted(t.each, reverse=True)[:slowest]
            ),
        ]
        for name, t in times.items()
    ]
    total = sum(t.seconds for t in times.values())
    rows.append(
        [
            "**sum**",
            sum(t.tests for t in times.values()),
            sum(t.not_passed for t in times.values()),
            f"{total / 60:.1f}",
            "",
        ]
    )
    return markdown_table(["folder", "tests", "not passed", "minutes (summed)", "slowest"], rows)


# ---- the results file: one measurement per tier, the latest ----------------------------------------------------------


def parts_of(log: str) -> dict[str, int]:
    """The ``tier: <part> <seconds> s`` lines of a tier's log (scripts/test prints one per part).

    >>> parts_of("x\\ntier: setup 50 s\\n....\\ntier: pytest-cpu 169 s\\n")
    {'setup': 50, 'pytest-cpu': 169}
    """
    return {m[1]: int(m[2]) for m in re.finditer(r"^tier: (\S+) (\d+) s$", log, re.M)}


def wall_of(log: str) -> float | None:
    """The tier's whole wall time: bash ``time``'s ``real`` line, else scripts/nightly's closing line.

    >>> wall_of("...\\nreal\\t11m58.412s\\nuser\\t19m12.0s\\n"), wall_of("finished with status 0 in 39 min 59 s")
    (718.412, 2399.0)
    >>> wall_of("no timing") is None
    True
    """
    if m := re.search(r"^real\s+(?:(\d+)m)?([\d.]+)s$", log, re.M):
        return round(int(m[1] or 0) * 60 + float(m[2]), 3)
    if m := re.search(r"finished with status \d+ in (\d+) min (\d+) s", log):
        return float(int(m[1]) * 60 + int(m[2]))
    return None


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def measurement(
    times: dict[str, FolderTime], log: str, command: str, note: str = "", slowest: int = 3
) -> dict[str, Any]:
    """One tier's record: the command, commit, machine, whole and parts' wall time, and the folders' sums."""
    return {
        "command": command,
        "commit": _git("rev-parse", "HEAD"),
        "uncommitted": [line[3:] for line in _git("status", "--porcelain").splitlines() if line.strip()],
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "note": note,
        "whole_s": wall_of(log),
        "parts_s": parts_of(log),
        "tests": sum(t.tests for t in times.values()),
        "not_passed": sum(t.not_passed for t in times.values()),
        "folders": {
            name: {
                "tests": t.tests,
                "not_passed": t.not_passed,
                "seconds": round(t.seconds, 1),
                "slowest": [[round(s, 1), test] for s, test in sorted(t.each, reverse=True)[:slowest]],
            }
            for name, t in times.items()
        },
    }


def record(tier: str, entry: dict[str, Any], path: Path = RESULTS_PATH) -> Path:
    """``path`` with ``tier``'s measurement replaced by ``entry`` (the others kept)."""
    doc = json.loads(path.read_text()) if path.exists() else {"tiers": {}}
    doc["tiers"][tier] = entry
    doc["tiers"] = {
        name: doc["tiers"][name]
        for name in [*TIERS, *sorted(set(doc["tiers"]) - set(TIERS))]
        if name in doc["tiers"]
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


# ---- the rendered tables ---------------------------------------------------------------------------------------------


def minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


def markdown(doc: dict[str, Any]) -> str:
    """The tiers' latest measurements, then where each one's time went (folders summed over workers).

    >>> doc = {"tiers": {"quick": {"command": "t", "commit": "abc1234def", "uncommitted": [],
    ...     "finished": "2026-12-03T22:00:00+00:00", "machine": {"cpus_usable": 2}, "note": "", "whole_s": 136,
    ...     "parts_s": {"pytest-quick": 136}, "tests": 1204, "not_passed": 0,
    ...     "folders": {"tests/unit": {"tests": 600, "not_passed": 0, "seconds": 72.0, "slowest": [[9.0, "t::x"]]}}}}}
    >>> print(markdown(doc))
    | tier | whole | bar | parts (wall) | tests | measured with | at | machine |
    |---|---|---|---|---|---|---|---|
    | quick | **2.3 min** | 3 min | pytest-quick 136 s | 1204 passed | `t` | abc1234, 2026-12-03 | 2 cores |
    <BLANKLINE>
    | tier | folder | tests | not passed | minutes (summed over workers) | slowest |
    |---|---|---|---|---|---|
    | quick | tests/unit | 600 | 0 | 1.2 | x 9 s |
    """
    rows, folders, notes = [], [], []
    for name, t in doc["tiers"].items():
        passed = (
            f"{t['tests'] - t['not_passed']} passed"
            + (f", **{t['not_passed']} not passed**" if t["not_passed"] else "")
            if t["tests"] or t["not_passed"]
            else "—"
        )
        at = str(t.get("commit", ""))[:7] + (" + uncommitted" if t.get("uncommitted") else "")
        cores = t.get("machine", {}).get("cpus_usable")
        where = "; ".join(x for x in [f"{cores} cores" if cores else "", t.get("note", "")] if x)
        bar = TIERS.get(name, {}).get("bar_min")
        rows.append(
            [
                name,
                f"**{minutes(t.get('whole_s'))}**",
                f"{bar} min" if bar else "—",
                ", ".join(f"{part} {s:.0f} s" for part, s in t.get("parts_s", {}).items()) or "—",
                passed,
                f"`{t['command']}`",
                f"{at}, {t['finished'][:10]}",
                where or "—",
            ]
        )
        for folder, f in t.get("folders", {}).items():
            folders.append(
                [
                    name,
                    folder,
                    f.get("tests"),
                    f.get("not_passed"),
                    f"{f['seconds'] / 60:.1f}",
                    "; ".join(
                        f"{test.rsplit('::', 1)[-1].rsplit('.', 1)[-1]} {s:.0f} s"
                        for s, test in f.get("slowest", [])
                    ),
                ]
            )
        if t.get("transcribed"):
            notes.append(f"- {name}: {t['transcribed']}")
    out = [
        markdown_table(["tier", "whole", "bar", "parts (wall)", "tests", "measured with", "at", "machine"], rows)
    ]
    if folders:
        out += [
            "",
            markdown_table(
                ["tier", "folder", "tests", "not passed", "minutes (summed over workers)", "slowest"], folders
            ),
        ]
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def render(doc: dict[str, Any], text: str) -> str:
    """``text`` (docs/ci-tiers.md) with its ``tier-times`` section drawn from ``doc``."""
    return rendered.replace(text, SECTION, markdown(doc), source=str(RESULTS_PATH), command=RENDER_COMMAND)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "junit",
        type=Path,
        nargs="*",
        help="pytest's --junitxml files (scripts/test writes one per "
        "phase with DILOCO_JUNIT_DIR=<dir>): their folders summed together",
    )
    ap.add_argument("--slowest", type=int, default=3, help="name this many slowest tests per folder")
    ap.add_argument("--record", choices=list(TIERS), help=f"store this tier's measurement in {RESULTS_PATH}")
    ap.add_argument(
        "--log", type=Path, help="the tier's console output (with --record): its `time` and `tier:` lines"
    )
    ap.add_argument("--command", help="how it was measured (with --record; default: the tier's usual command)")
    ap.add_argument(
        "--note", default="", help="with --record: what else to know (e.g. 'fresh clone, Go caches cold')"
    )
    ap.add_argument("--render", action="store_true", help=f"draw {RESULTS_PATH} into {DOC}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {DOC} is not what {RESULTS_PATH} renders to")
    args = ap.parse_args(argv)
    if args.render or args.check:
        text = DOC.read_text()
        new = render(json.loads(RESULTS_PATH.read_text()), text)
        if args.check:
            print(f"{DOC}: {'stale: run ' + RENDER_COMMAND.strip('`') if new != text else 'up to date'}")
            return int(new != text)
        DOC.write_text(new)
        print(f"rendered {RESULTS_PATH} into {DOC}")
        return 0
    if not args.junit and not (args.record and args.log):
        ap.error(
            "name the JUnit files (or --record TIER --log LOG for a tier with no tests, or --render / --check)"
        )
    try:
        times = tier_times(*(path.read_text(encoding="utf-8") for path in args.junit))
        log = args.log.read_text(encoding="utf-8", errors="replace") if args.log else ""
    except (OSError, ET.ParseError) as err:
        print(f"error: cannot read {' '.join(map(str, args.junit))} as JUnit XML files: {err}", file=sys.stderr)
        return 2
    print(table(times, args.slowest))
    if args.record:
        entry = measurement(times, log, args.command or TIERS[args.record]["measure"], args.note, args.slowest)
        print(
            f"recorded {args.record} in {record(args.record, entry)}; now: .venv/bin/python -m "
            "benchmarks.costs.tier_times --render"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
