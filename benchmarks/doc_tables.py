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
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import rendered
from benchmarks.common import markdown_table
from benchmarks.costs import tier_times
from chaos.scale.quantities import format_count

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
    ("docs/benchmarks.md", "heterogeneous-small", "heterogeneous_small.json"),
    ("docs/benchmarks.md", "grace-waits", "grace_waits.json"),
    ("docs/benchmarks.md", "grace-waits-local", "grace_waits_local.json"),
    ("docs/benchmarks.md", "fault-latency", "fault_latency.json"),
    ("docs/benchmarks.md", "fault-schedule", "fault_latency.json"),
    ("docs/benchmarks.md", "learner-overhead", "learner_overhead.json"),
    ("docs/benchmarks.md", "learner-overhead-cpu", "learner_overhead.json"),
    ("docs/benchmarks.md", "learner-overhead-small", "learner_overhead_small.json"),
    ("docs/benchmarks.md", "learner-overhead-small-cpu", "learner_overhead_small.json"),
    ("docs/kubernetes.md", "cluster-test", "cluster_test.json"),
    ("docs/benchmarks.md", "search-phases", "search_phases.json"),
    ("docs/scale-simulator.md", "scale-paper-table", "scale_paper_table.json"),
    ("docs/scale-simulator.md", "scale-speed", "scale_paper_table.json"),
    ("docs/scale-simulator.md", "scale-speed-sides", "scale_speed.json"),
    ("docs/scale-simulator.md", "scale-bandwidth", "scale_bandwidth.json"),
    ("docs/scale-simulator.md", "scale-sim-to-real-calibration", "scale_sim_to_real.json"),
    ("docs/scale-simulator.md", "scale-sim-to-real", "scale_sim_to_real.json"),
    ("docs/scenarios-and-checks.md", "under-load", "under_load.json"),
    ("docs/scenarios-and-checks.md", "sim-seeds", "sim_seeds.json"),
    ("docs/testing-your-trainer.md", "torchft", "torchft.json"),
    ("docs/testing-your-trainer.md", "torchft-defects", "torchft_defects.json"),
    ("docs/scenarios-and-checks.md", "under-load-once", "under_load_once.json"),
    ("docs/scenarios-and-checks.md", "parity-false-alarm", "parity_false_alarm.json"),
    ("docs/scenarios-and-checks.md", "parity-pairing", "parity_pairing.json"),
    ("docs/trainer.md", "corpus", "corpus.json"),
    ("docs/trainer.md", "corpus-trained", "corpus_trained.json"),
    ("docs/benchmarks.md", "reference-parity-small", "reference_parity_small.json"),
    ("docs/benchmarks.md", "ablations-small", "ablations_small.json"),
    ("docs/benchmarks.md", "ablations-small-hetero", "ablations_small_hetero.json"),
    ("docs/benchmarks.md", "reference-parity-small-links", "reference_parity_small_links_sync.json"),
    ("docs/trainer.md", "compute-dtype", "compute_dtype.json"),
    ("docs/benchmarks.md", "state-size", "state_size.json"),
    ("docs/security.md", "drift-ratio", "drift_ratio.json"),
    ("docs/security.md", "drift-bound", "drift_bound.json"),
    ("docs/security.md", "drift-bound-real", "drift_bound_real.json"),
    ("docs/security.md", "drift-attack", "drift_attack.json"),
    ("docs/security.md", "round-hold", "round_hold.json"),
    ("docs/security.md", "soak", "soak.json"),
]


def caption(result: dict[str, Any]) -> str:
    """The line under a table: what measured it, when, where (and at which commit, if recorded)."""
    m = result.get("machine") or {}
    where = (
        f"{m.get('cpus_usable', m.get('cpus', '?'))} cores ({m.get('arch', '?')})" if m else "machine not recorded"
    )
    commit = f" at {result['commit']}" if result.get("commit") else ""
    return f"*Measured by `{result['command']}`{commit}, finished {result.get('finished', '?')}, on {where}.*"


def speed_table(result: dict[str, Any]) -> str:
    """The scale simulator's wall time for one cell at the paper table's largest chip count, per row.

    >>> print(speed_table({"results": {"cells": [
    ...     {"row": "data-parallel", "chips": 1e5, "sim_seconds": [9.0]},
    ...     {"row": "data-parallel", "chips": 2.4e6, "sim_seconds": [0.08, 0.1, 0.09]},
    ...     {"row": "decoupled-16", "chips": 2.4e6, "sim_seconds": [91.1]}]}}))
    | configuration (2.4M chips) | wall s per simulated run (median over seeds) |
    |---|---|
    | data-parallel | 0.09 |
    | decoupled-16 | 91.1 |
    """
    cells = result["results"]["cells"]
    largest = max(c["chips"] for c in cells)
    rows = [
        (c["row"], statistics.median(c["sim_seconds"]))
        for c in cells
        if c["chips"] == largest and c["sim_seconds"]
    ]
    return markdown_table(
        [f"configuration ({format_count(largest)} chips)", "wall s per simulated run (median over seeds)"], rows
    )


def calibration_table(result: dict[str, Any]) -> str:
    """What sim-to-real calibrated the simulator to, from the fault-free real runs.

    >>> print(calibration_table({"config": {"calibration": {"step_s": 0.0522, "sync_round_overhead_s": 0.1234,
    ...                                                     "rejoin_s": 1.97}}}))
    | step time (s) | synchronous round overhead (s) | restart to first step (s) |
    |---|---|---|
    | 0.0522 | 0.123 | 1.97 |
    """
    c = result["config"]["calibration"]
    return markdown_table(
        ["step time (s)", "synchronous round overhead (s)", "restart to first step (s)"],
        [(c["step_s"], c["sync_round_overhead_s"], c["rejoin_s"])],
    )


# Sections drawn from a results file's other fields than its ``table``.
TABLES: dict[str, Callable[[dict[str, Any]], str]] = {
    "scale-speed": speed_table,
    "scale-sim-to-real-calibration": calibration_table,
    "fault-schedule": lambda result: result["results"]["schedule_table"],  # fault_latency --compare-poll
    "learner-overhead-cpu": lambda result: result["results"]["cpu_table"],
    "learner-overhead-small-cpu": lambda result: result["results"]["cpu_table"],
}


def _load(root: Path, name: str) -> dict[str, Any] | None:
    path = root / RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _source(result: dict[str, Any]) -> str:
    at = str(result.get("commit") or "")[:7]
    return f"`{result['command']}`" + (f", {at}" if at else "") + f", {str(result['finished'])[:10]}"


def waits_table(root: Path = ROOT) -> str:
    """What users wait for (issue 42's rows), each from the results file of the benchmark that measures it side
    by side with what it is compared to; a row whose file is missing says so.

    >>> rows = waits_table(Path("/nonexistent")).splitlines()[2:]
    >>> len(rows), {r.split(" | ")[1] for r in rows}
    (6, {'not measured'})
    """

    def missing(label: str, goal: str, command: str) -> list[Any]:
        return [label, "not measured", "—", goal, "—", f"`{command}`"]

    rows: list[list[Any]] = []
    label, goal = "the scale simulator: 2.4M chips, one week, `--compare`", "≤ 5 s"
    speed = _load(root, "scale_speed.json")
    week = (speed or {}).get("results", {}).get("week")
    if speed and week:
        now, before = week["median"]["now"]["wall_s"], week["median"]["baseline"]["wall_s"]
        met = "yes" if now <= week["case"]["goal_s"] else "no"
        base = f"{before:.1f} s before ({speed['config']['baseline']}): {before / now:.1f}× faster"
        rows.append([label, f"{now:.1f} s", base, f"≤ {week['case']['goal_s']:g} s", met, _source(speed)])
    else:
        rows.append(missing(label, goal, ".venv/bin/python -m benchmarks.costs.scale_speed"))
    for name, preset in (("learner_overhead", "tiny"), ("learner_overhead_small", "small")):
        label, goal = f"a learner's step with background syncing ({preset} preset)", "≤ 3%"
        lo = _load(root, f"{name}.json")
        if lo:
            r = lo["results"]
            beside = f"a bare JAX loop: {r['median_bare']:.3g} steps/s, the learner {r['median_synced']:.3g}"
            if "median_bare_blocking" in r:  # the overhead's parts: waiting for every step, and the syncing
                beside += (
                    f"; blocking every step {r['median_bare_blocking']:.3g} (of the overhead, the step boundary "
                    f"{100 * r['step_boundary']:.1f}%, syncing {100 * r['syncing']:.1f}%)"
                )
            if "extra_cpu_ms_per_sync" in r:
                beside += f"; {r['extra_cpu_ms_per_sync']:.2g} ms of CPU per sync"
            met = "yes" if r["overhead"] <= 0.03 else "no"
            rows.append([label, f"{100 * r['overhead']:.1f}% slower", beside, goal, met, _source(lo)])
        else:
            command = ".venv/bin/python -m benchmarks.costs.learner_overhead" + (
                "" if preset == "tiny" else f" --size {preset} --steps 40 --results-name {name}"
            )
            rows.append(missing(label, goal, command))
    label, goal = "a fault's start or heal, planned time to the controller's call", "≤ 10 ms p99"
    fl = _load(root, "fault_latency.json")
    lag = (fl or {}).get("results", {}).get("schedule_lag")
    if fl and lag:
        plan, poll = lag["plan"], lag["poll"]
        now_s = f"p99 {plan['p99_ms']:.1f} ms (median {plan['median_ms']:.1f})"
        beside = f"a fixed 0.1 s poll: p99 {poll['p99_ms']:.0f} ms"
        rows.append([label, now_s, beside, goal, "yes" if plan["p99_ms"] <= 10 else "no", _source(fl)])
    else:
        rows.append(missing(label, goal, ".venv/bin/python -m benchmarks.costs.fault_latency --compare-poll"))
    tiers = (_load(root, "tier_times.json") or {}).get("tiers", {})
    for name, label, goal_min, shared in (
        ("main", "`scripts/main` on a fresh machine", 8, False),
        ("per-change", "the per-change tier from a fresh clone, the machine shared as CI's are", 15, True),
    ):
        t = tiers.get(name)
        if not t or t.get("whole_s") is None:
            rows.append(missing(label, f"≤ {goal_min} min", ".venv/bin/python -m benchmarks.costs.tier_times"))
            continue
        parts = ", ".join(f"{part} {sec:.0f} s" for part, sec in t.get("parts_s", {}).items())
        rows.append(
            [
                label,
                tier_times.minutes(t["whole_s"]),
                parts or "—",
                f"≤ {goal_min} min",
                _met(t["whole_s"] <= goal_min * 60, shared, str(t.get("note", ""))),
                f"`{t['command']}`, {str(t.get('commit', ''))[:7]}, {t['finished'][:10]}"
                + (f" ({t['note']})" if t.get("note") else ""),
            ]
        )
    return markdown_table(["what users wait for", "now", "measured beside it", "goal", "met", "measured by"], rows)


def _met(met: bool, shared: bool, note: str) -> str:
    """Whether a goal is met; one set on a shared machine is met only by a measurement that says it was.

    >>> _met(True, True, ""), _met(True, True, "under load: two nice-19 processes"), _met(False, False, "")
    ('idle: yes; shared: not measured', 'yes', 'no')
    """
    if shared and not any(w in note for w in ("load", "shared")):
        return f"idle: {'yes' if met else 'no'}; shared: not measured"
    return "yes" if met else "no"


# Sections drawn from several results files (no one caption: each row names its own).
SUMMARIES: list[tuple[str, str, Callable[[Path], str]]] = [
    ("docs/benchmarks.md", "user-waits", waits_table),
]


def body(result: dict[str, Any], section: str = "") -> str:
    table = TABLES[section](result) if section in TABLES else result["table"]
    return f"{table.strip()}\n\n{caption(result)}"


def render(doc: str, text: str, root: Path = ROOT) -> str:
    """``text`` (the document ``doc``) with each of its sections redrawn from its results file."""
    for name_doc, section, results in SECTIONS:
        if name_doc != doc:
            continue
        result = json.loads((root / RESULTS / results).read_text())
        text = rendered.replace(
            text, section, body(result, section), source=f"benchmarks/results/{results}", command=RENDER_COMMAND
        )
    for name_doc, section, table in SUMMARIES:
        if name_doc == doc:
            text = rendered.replace(
                text, section, table(root), source="several results files", command=RENDER_COMMAND
            )
    return text


def docs() -> list[str]:
    return sorted({doc for doc, _, _ in SECTIONS} | {doc for doc, _, _ in SUMMARIES})


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
