"""The real-process catch matrix: collect a nightly run of tests/nightly/test_mutants_real.py into
``benchmarks/results/mutants_real.json`` and render it into docs/scenarios-and-checks.md.

    .venv/bin/python -m pytest tests/nightly/test_mutants_real.py --chaos-nightly --chaos-no-rotation \\
        --chaos-reports DIR
    .venv/bin/python -m tests.mutants.real_matrix DIR [DIR …] [--render]

Each test's report folder holds its mutant's log (``<mutant>.mutant.jsonl``) and its run directories, in the order
they ran: the scenario unmutated (absent when an earlier test of the same scenario ran it) and then mutated. A later
folder given for the same mutant replaces an earlier one (a re-run after a fix). The JSON has the deterministic
matrix's shape (:func:`tests.mutants.runner.results_doc`), so :mod:`tests.mutants.render` draws both tables.

Example (a folder's runs, oldest first, and which is the mutated one):
    >>> [r["role"] for r in _roles([{"started_at": 2.0}, {"started_at": 1.0}])]
    ['unmutated', 'mutated']
    >>> [r["role"] for r in _roles([{"started_at": 5.0}])]
    ['mutated']
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.mutants import render
from tests.mutants.registry import MUTANTS_BY_NAME
from tests.mutants.runner import git_state

RESULTS_PATH = Path("benchmarks/results/mutants_real.json")
NAME = "mutants-real"  # the docs' marker: <!-- mutants-real:begin … --> … <!-- mutants-real:end -->


def _roles(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    runs = sorted(reports, key=lambda r: r["started_at"])
    return [{**r, "role": "mutated" if i == len(runs) - 1 else "unmutated"} for i, r in enumerate(runs)]


def collect(folders: list[Path]) -> dict[str, Any]:
    """The matrix of every test folder under ``folders`` (see the module docstring)."""
    mutants: dict[str, dict[str, Any]] = {}
    unmutated: dict[str, dict[str, Any]] = {}
    checks: list[str] = []
    for folder in folders:
        for test in sorted(p for p in folder.iterdir() if p.is_dir()):
            logs = list(test.glob("*.mutant.jsonl"))
            if len(logs) != 1:
                continue
            m = MUTANTS_BY_NAME[logs[0].name.removesuffix(".mutant.jsonl")]
            label = m.scenarios[0].label
            reports = [json.loads(p.read_text()) for p in test.glob("*/report.json")]
            for r in _roles(reports):
                verdicts = {v["name"]: v["status"] for v in r["verdicts"]}
                checks += [k for k in verdicts if k not in checks]
                cell = {
                    "scenario": label,
                    "seed": r["seed"],
                    "status": r["status"],
                    "verdicts": verdicts,
                    "run_dir": r["run_dir"],
                    "wall_s": r["wall_s"],
                }
                if r["role"] == "unmutated":
                    unmutated[label] = cell
                    continue
                base = unmutated.get(label, {}).get("verdicts", {})
                caught = [k for k, s in verdicts.items() if s == "fail" and base.get(k) != "fail"]
                mutants[m.name] = {
                    "name": m.name,
                    "mechanism": m.mechanism,
                    "description": m.description,
                    "caught_by": caught,
                    "changed": True,
                    "cells": [{**cell, "changed": True}],
                }
    ordered = [mutants[n] for n in sorted(mutants, key=lambda n: list(MUTANTS_BY_NAME).index(n))]
    return {
        "checks": checks,
        "survivors": [m["name"] for m in ordered if not m["caught_by"]],
        "unmutated": list(unmutated.values()),
        "mutants": ordered,
    }


def added(recorded: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The recorded matrix (a results document) with ``new``'s mutants and unmutated runs added, a new one replacing
    a recorded one of the same name or scenario; each kept in the registry's order.

    >>> old = {"results": {"checks": ["a"], "unmutated": [{"scenario": "s"}], "mutants": [
    ...     {"name": "momentum_reset", "caught_by": ["a"]}]}}
    >>> new = {"checks": ["b"], "unmutated": [{"scenario": "t"}], "mutants": [{"name": "nan_guard_off", "caught_by": []}]}
    >>> r = added(old, new)
    >>> [m["name"] for m in r["mutants"]], r["survivors"], r["checks"], [u["scenario"] for u in r["unmutated"]]
    (['momentum_reset', 'nan_guard_off'], ['nan_guard_off'], ['a', 'b'], ['s', 't'])
    """
    old = recorded["results"]
    mutants = {m["name"]: m for m in old["mutants"]} | {m["name"]: m for m in new["mutants"]}
    unmutated = {u["scenario"]: u for u in old["unmutated"]} | {u["scenario"]: u for u in new["unmutated"]}
    ordered = [mutants[n] for n in sorted(mutants, key=lambda n: list(MUTANTS_BY_NAME).index(n))]
    return {
        "checks": old["checks"] + [c for c in new["checks"] if c not in old["checks"]],
        "survivors": [m["name"] for m in ordered if not m["caught_by"]],
        "unmutated": list(unmutated.values()),
        "mutants": ordered,
    }


def results_doc(results: dict[str, Any], folders: list[Path]) -> dict[str, Any]:
    from benchmarks.common import machine

    return {
        "benchmark": "mutants_real",
        "command": ".venv/bin/python -m pytest tests/nightly/test_mutants_real.py --chaos-nightly "
        "--chaos-no-rotation --chaos-reports DIR; .venv/bin/python -m tests.mutants.real_matrix "
        + " ".join(str(f) for f in folders),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {
            "seeds": [0],
            "git": git_state(),
            "mode": "real processes (local backend)",
            "baseline": "the unmutated fault-free runs, shared (every real mutant is fault_free_unchanged)",
        },
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutants.real_matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="--chaos-reports folders of the nightly test")
    ap.add_argument("--json", type=Path, default=RESULTS_PATH)
    ap.add_argument("--render", action="store_true", help="also draw the table into docs/scenarios-and-checks.md")
    ap.add_argument(
        "--add",
        action="store_true",
        help="add these folders' mutants to the recorded matrix (replacing ones of the same name), keeping the rest",
    )
    args = ap.parse_args(argv)
    results = collect(args.folders)
    if args.add:
        results = added(json.loads(args.json.read_text()), results)
    doc = results_doc(results, args.folders)
    if args.add:  # the matrix was recorded at that commit; these folders' runs were added at this one
        doc["command"] += " --add"
        doc["config"]["added_at_git"] = doc["config"]["git"]
        doc["config"]["git"] = json.loads(args.json.read_text())["config"]["git"]
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    res = doc["results"]
    print(f"{len(res['mutants']) - len(res['survivors'])} of {len(res['mutants'])} caught; wrote {args.json}")
    if args.render:
        print(f"rendered into {render.update_docs(doc, name=NAME, source=str(args.json))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
