"""Every built-in scenario, unmutated, at several seeds in deterministic mode: each run must pass every check.

A check that fails a correct trainer on some seed is a false alarm; the per-change tier runs each built-in at its
file's own seed only. This runs seeds 0..N-1 (0: the file's; others draw another schedule and data, as the mutant
matrix does) with the fault-free baselines parity needs, and records each run's verdicts. Deterministic mode replays
exactly, so the machine's load does not change a verdict.

    .venv/bin/python -m benchmarks.costs.sim_seeds [--seeds 5] [--only kill-and-rejoin ...]

Writes ``benchmarks/results/sim_seeds.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, markdown_table, write_results
from chaos.scenario import builtin_scenarios, scenario_with
from chaos.sim import SimOptions, simulate
from trainer import events as ev


def run(name: str, seed: int) -> tuple[str, dict[str, str], int]:
    """The built-in ``name`` at ``seed`` (0: the file's; else another schedule and data), as the per-change tier
    runs it (each step the simulator's compute time plus the scenario's emulated delay): status, the checks that did
    not pass (their summaries), merges."""
    s = scenario_with(name, **({"seed": seed, "cluster": {"seed": seed}} if seed else {}))
    r = simulate(s, SimOptions(step_time_s=SimOptions().step_time_s + s.cluster.learner.step_delay_s))
    merges = sum(1 for e in r.history.events if isinstance(e, ev.Merge))
    return r.status, {v.name: v.summary for v in r.verdicts if v.status != "pass"}, merges


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.costs.sim_seeds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--only", nargs="+", help="these built-ins (default: all)")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    names = args.only or sorted(builtin_scenarios())
    t0 = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        for seed in range(args.seeds):
            status, not_passed, merges = run(name, seed)
            runs.setdefault(name, []).append(
                {"seed": seed, "status": status, "not_passed": not_passed, "merges": merges}
            )
            print(f"{name} seed {seed}: {status} {not_passed or ''}", flush=True)
    rows = [
        [
            name,
            len(r),
            sum(x["status"] == "pass" for x in r),
            ", ".join(sorted({k for x in r for k in x["not_passed"]})),
        ]
        for name, r in runs.items()
    ]
    table = markdown_table(["scenario", "runs", "pass", "checks that did not pass"], rows)
    passed = all(x["status"] == "pass" for r in runs.values() for x in r)
    write_results(
        "sim_seeds",
        config={"seeds": list(range(args.seeds)), "mode": "deterministic (chaos.sim), fault-free baselines on"},
        results={"runs": runs, "all_pass": passed, "wall_s": round(time.monotonic() - t0, 1)},
        table=table,
        out_dir=args.out_dir,
    )
    print(table)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
