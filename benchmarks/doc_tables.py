"""The benchmarks' results tables in the docs, drawn from their results files (never retyped).

    .venv/bin/python -m benchmarks.doc_tables            # redraw every section below from its JSON
    .venv/bin/python -m benchmarks.doc_tables --check    # exit 1 if a doc is not what its JSON renders to

Each benchmark writes ``benchmarks/results/<name>.json`` with its command, when it finished, the machine and the
Markdown ``table`` it printed (``benchmarks.common.write_results``). A doc shows that table between marker
comments (``benchmarks.rendered``) with one line under it naming the command, the finish time, the machine and,
where the file records one, the commit; the prose around it says what the table measures and how to read it.
Re-running a benchmark and then this script updates the doc; tests/unit/test_benchmark_docs.py fails when they
disagree.

Example:
    >>> print(caption({"command": "python -m benchmarks.x", "finished": "2026-01-01T00:00:00+00:00",
    ...                "machine": {"cpus_usable": 2, "arch": "x86_64"}}))
    *Measured by `python -m benchmarks.x`, finished 2026-01-01T00:00:00+00:00, on 2 cores (x86_64).*
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import rendered

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks/results")
RENDER_COMMAND = "`.venv/bin/python -m benchmarks.doc_tables`"
# (document, section name, results file): every generated benchmark table in the docs.
SECTIONS: list[tuple[str, str, str]] = [
    ("docs/benchmarks.md", "reference-parity", "reference_parity.json"),
    ("docs/benchmarks.md", "reference-parity-period", "reference_parity_period.json"),
    ("docs/benchmarks.md", "reference-parity-v64", "reference_parity_v64.json"),
    ("docs/benchmarks.md", "reference-parity-learnable", "reference_parity_learnable.json"),
    ("docs/benchmarks.md", "reference-parity-learnable-9m", "reference_parity_learnable_9m.json"),
    ("docs/benchmarks.md", "slow-links", "slow_links.json"),
    ("docs/benchmarks.md", "goodput", "goodput.json"),
    ("docs/benchmarks.md", "heterogeneous-wan", "heterogeneous_wan.json"),
    ("docs/benchmarks.md", "heterogeneous-quiet", "heterogeneous_quiet.json"),
    ("docs/benchmarks.md", "fault-latency", "fault_latency.json"),
    ("docs/benchmarks.md", "learner-overhead", "learner_overhead.json"),
    ("docs/benchmarks.md", "search-phases", "search_phases.json"),
    ("docs/scale-simulator.md", "scale-paper-table", "scale_paper_table.json"),
    ("docs/scale-simulator.md", "scale-bandwidth", "scale_bandwidth.json"),
    ("docs/scale-simulator.md", "scale-sim-to-real", "scale_sim_to_real.json"),
    ("docs/scenarios-and-checks.md", "under-load", "under_load.json"),
    ("docs/scenarios-and-checks.md", "parity-false-alarm", "parity_false_alarm.json"),
    ("docs/scenarios-and-checks.md", "parity-pairing", "parity_pairing.json"),
]


def caption(result: dict[str, Any]) -> str:
    """The line under a table: what measured it, when, where (and at which commit, if recorded)."""
    m = result.get("machine") or {}
    where = (
        f"{m.get('cpus_usable', m.get('cpus', '?'))} cores ({m.get('arch', '?')})" if m else "machine not recorded"
    )
    commit = f" at {result['commit']}" if result.get("commit") else ""
    return f"*Measured by `{result['command']}`{commit}, finished {result.get('finished', '?')}, on {where}.*"


def body(result: dict[str, Any]) -> str:
    return f"{result['table'].strip()}\n\n{caption(result)}"


def render(doc: str, text: str, root: Path = ROOT) -> str:
    """``text`` (the document ``doc``) with each of its sections redrawn from its results file."""
    for name_doc, section, results in SECTIONS:
        if name_doc != doc:
            continue
        result = json.loads((root / RESULTS / results).read_text())
        text = rendered.replace(
            text, section, body(result), source=f"benchmarks/results/{results}", command=RENDER_COMMAND
        )
    return text


def docs() -> list[str]:
    return sorted({doc for doc, _, _ in SECTIONS})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a doc is not what its results render to")
    args = ap.parse_args(argv)
    stale = []
    for doc in docs():
        path = ROOT / doc
        text = path.read_text()
        new = render(doc, text)
        if new != text:
            stale.append(doc)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale: {', '.join(stale)} (run .venv/bin/python -m benchmarks.doc_tables)", file=sys.stderr)
        return 1
    for doc in stale:
        print(f"redrew {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
