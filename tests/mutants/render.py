"""Render ``benchmarks/results/mutants.json`` (the catch matrix) into docs/scenarios-and-checks.md.

    .venv/bin/python -m tests.mutants.render            # rewrite the table between the marker comments
    .venv/bin/python -m tests.mutants.render --check    # exit 1 if the document is not what the JSON renders to

The table sits between ``<!-- mutants:begin ... -->`` and ``<!-- mutants:end -->``; everything outside the markers is
left alone. One row per mutant and scenario, one column per check: **FAIL** where that check failed (``FAIL 1/3``: on
one of three seeds), ``·`` passed, ``indet`` undecided, ``—`` not enabled by the scenario.

Example:
    >>> doc = {"command": "python -m tests.mutants", "finished": "2026-12-04T12:00:00+00:00",
    ...        "config": {"git": {"commit": "abc1234def", "uncommitted": []}, "seeds": [0]},
    ...        "results": {"checks": ["liveness", "safety"], "survivors": [], "unmutated": [
    ...            {"scenario": "s", "seed": 0, "status": "pass", "verdicts": {"liveness": "pass", "safety": "pass"}}],
    ...          "mutants": [{"name": "m", "mechanism": "weights", "description": "d", "caught_by": ["safety"],
    ...                       "changed": True, "cells": [{"scenario": "s", "seed": 0, "changed": True,
    ...                       "verdicts": {"liveness": "pass", "safety": "fail"}}]}]}}
    >>> print(markdown(doc).splitlines()[-1])
    | m | weights | s | · | **FAIL** | safety |
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table
from tests.mutants.runner import _mark as runner_mark

DOC = Path("docs/scenarios-and-checks.md")


def begin(
    name: str = "mutants",
    source: str = "benchmarks/results/mutants.json",
    command: str = "`.venv/bin/python -m tests.mutants.render`",
) -> str:
    """The opening marker of a rendered table (``name``: mutants, the deterministic matrix; mutants-real, the real
    processes' one, :mod:`tests.mutants.real_matrix`)."""
    return f"<!-- {name}:begin (rendered from {source} by {command}; do not edit by hand) -->"


def end(name: str = "mutants") -> str:
    return f"<!-- {name}:end -->"


def _section(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- {re.escape(name)}:begin[^\n]*-->\n.*?<!-- {re.escape(name)}:end -->", re.S)


BEGIN, END, SECTION = begin(), end(), _section("mutants")
COMMANDS = {
    "mutants": "`.venv/bin/python -m tests.mutants.render`",
    "mutants-real": "`.venv/bin/python -m tests.mutants.real_matrix DIR --render`",
}


def _mark(statuses: list[str]) -> str:
    """The printed matrix's cell (runner.mark), in markdown: failures bold, a pass a middle dot."""
    cell = runner_mark(statuses)
    return f"**{cell}**" if cell.startswith("FAIL") else "·" if cell == "." else cell


def markdown(doc: dict[str, Any]) -> str:
    """The matrix section: how it was measured, then the table."""
    res, cfg = doc["results"], doc["config"]
    checks: list[str] = res["checks"]
    git = cfg.get("git", {})
    mutants = res["mutants"]
    caught = sum(1 for m in mutants if m["caught_by"])
    uncommitted = git.get("uncommitted") or []
    lines = [
        f"Measured with `{doc['command']}` at {str(git.get('commit', ''))[:7]}"
        + (
            f" with {len(uncommitted)} uncommitted package file(s) ({', '.join(uncommitted[:6])}"
            f"{', …' if len(uncommitted) > 6 else ''})"
            if uncommitted
            else ""
        )
        + f", {doc['finished'][:10]}, seed(s) {', '.join(map(str, cfg.get('seeds', [0])))}: "
        f"**{caught} of {len(mutants)} mutants caught**"
        + (f"; surviving: {', '.join(res['survivors'])}" if res["survivors"] else "")
        + ".",
        "",
    ]
    rows: list[list[Any]] = []
    unmutated = res["unmutated"]
    scenarios = list(dict.fromkeys(c["scenario"] for c in unmutated))
    rows.append(
        [
            "(unmutated)",
            "—",
            f"{len(scenarios)} scenarios",
            *(_mark([c["verdicts"][k] for c in unmutated if k in c["verdicts"]]) for k in checks),
            "all pass" if all(c["status"] == "pass" for c in unmutated) else "**NOT ALL PASS**",
        ]
    )
    for m in mutants:
        per: dict[str, list[dict[str, Any]]] = {}
        for c in m["cells"]:
            per.setdefault(c["scenario"], []).append(c)
        for label, cells in per.items():
            failed = [k for k in checks if any(c["verdicts"].get(k) == "fail" for c in cells)]
            verdict = (
                ", ".join(failed)
                if failed
                else ("survives" if any(c.get("changed") for c in cells) else "survives (run unchanged)")
            )
            verdict += " (timed out)" if any(c.get("status") == "timeout" for c in cells) else ""
            rows.append(
                [
                    m["name"],
                    m["mechanism"],
                    label,
                    *(_mark([c["verdicts"][k] for c in cells if k in c["verdicts"]]) for k in checks),
                    verdict,
                ]
            )
    lines.append(markdown_table(["mutant", "mechanism", "scenario", *checks, "caught by"], rows))
    return "\n".join(lines)


def section(doc: dict[str, Any], name: str = "mutants", source: str = "benchmarks/results/mutants.json") -> str:
    return f"{begin(name, source, COMMANDS[name])}\n{markdown(doc)}\n{end(name)}"


def rendered(
    text: str, doc: dict[str, Any], name: str = "mutants", source: str = "benchmarks/results/mutants.json"
) -> str:
    """``text`` with its section ``name`` replaced by the matrix of ``doc``."""
    if not _section(name).search(text):
        raise ValueError(f"no '<!-- {name}:begin …' … '{end(name)}' markers in the document")
    return _section(name).sub(lambda _: section(doc, name, source), text, count=1)


def update_docs(
    doc: dict[str, Any], path: Path = DOC, name: str = "mutants", source: str = "benchmarks/results/mutants.json"
) -> Path:
    path.write_text(rendered(path.read_text(), doc, name, source))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutants.render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="benchmarks/results/mutants.json")
    ap.add_argument("--doc", default=str(DOC))
    ap.add_argument("--check", action="store_true", help="exit 1 if the document is stale, change nothing")
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.json).read_text())
    path = Path(args.doc)
    if args.check:
        stale = rendered(path.read_text(), doc) != path.read_text()
        print(f"{path}: {'stale: run python -m tests.mutants.render' if stale else 'up to date'}")
        return int(stale)
    update_docs(doc, path)
    print(f"rendered {args.json} into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
