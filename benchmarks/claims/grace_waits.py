"""Whom the grace window waits for: every active learner (the default) against only those heard lately.

With ``overlap_steps: auto`` the slack is 1–2 steps whatever is measured, so the grace window is a constant
0.5–1 step (trainer/core/grace.py). A round merges at once when everyone it waits for is in, so with live
stragglers its wait already follows their arrivals; what it wastes is the whole window, round after round, for
a learner that is down, until the liveness timeout stops counting it as active. ``grace_waits_for: heard`` waits
only for the learners heard within three report intervals.

This compares the two in deterministic mode (chaos/sim: the real syncer core on a virtual clock, surrogate
learners, reproducible bit for bit and independent of the machine's load), on the built-in scenarios whose
faults take learners out or slow them down, each at ``--seeds`` (the scenario's and the cluster's seed):

    .venv/bin/python -m benchmarks.claims.grace_waits [--seeds 200 201 202 203 204] [--scenarios ...]

Per scenario and setting, over seeds (mean ± 95% t interval where it is per run): the grace each merge that
someone was missing from waited, in steps (median and 90th percentile pooled over runs); steps waited per run
(the sum: time the merges were held back); learners per merge; uploads refused as late per run; runs any check
failed (no baseline is run, so parity is indeterminate, never failed). Its surrogate
learners say nothing about model quality: the quality ablation is ``reference_parity --only decoupled heard``.
Prints a table, writes ``benchmarks/results/grace_waits.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks import measures as m
from benchmarks.common import markdown_table, write_results
from chaos.history import History
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from trainer import events as ev

SETTINGS = ("active", "heard")
# The built-ins whose faults take a learner out (kill, pause, partition) or slow one down.
SCENARIOS = ("kill-and-rejoin", "kill-one-learner", "rolling-restarts", "partition-one", "straggler", "random-mix")


def summarise(h: History) -> dict[str, Any]:
    waits = m.grace_waits(h.events)
    return {
        "grace_waits": waits,
        "waited_steps": sum(waits),
        "per_merge": m.participation(h.events)["per_merge"],
        "late_refused": m.late_refused(h.events),
        "merges": len(h.of(ev.Merge)),
        "status": "",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[200, 201, 202, 203, 204])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for name in args.scenarios:
        for setting in SETTINGS:
            for seed in args.seeds:
                s = scenario_with(
                    name, seed=seed, cluster={"seed": seed, "algorithm": {"grace_waits_for": setting}}
                )
                r = simulate(s, SimOptions(baseline=False))
                row = summarise(r.history)
                row["status"] = r.status
                runs.setdefault(name, {}).setdefault(setting, {})[seed] = row
                print(
                    f"{name} {setting} seed {seed}: {row['status']}, {row['merges']} merges, "
                    f"waited {row['waited_steps']:.1f} steps, {row['late_refused']} late",
                    flush=True,
                )
    header = [
        "scenario",
        "grace waits for",
        "grace waited per merge missing someone, steps (median; p90)",
        "steps waited per run",
        "learners / merge",
        "late uploads refused / run",
        "runs with a failed check",
    ]
    rows = []
    for name, by_setting in runs.items():
        for setting, rs in by_setting.items():
            waits = [w for r in rs.values() for w in r["grace_waits"]]
            rows.append(
                [
                    name,
                    setting,
                    m.format_median_p90(waits),
                    m.format_ci([r["waited_steps"] for r in rs.values()], 1),
                    m.format_ci([r["per_merge"] for r in rs.values()], 2),
                    m.format_ci([r["late_refused"] for r in rs.values()], 1),
                    f"{sum(r['status'] == 'fail' for r in rs.values())} / {len(rs)}",
                ]
            )
    table = markdown_table(header, rows)
    print(f"\nover seeds {args.seeds}, deterministic mode\n\n{table}")
    for by_setting in runs.values():  # the raw waits are in the table's percentiles; keep the JSON small
        for rs in by_setting.values():
            for row in rs.values():
                row["grace_waits"] = [round(w, 4) for w in row["grace_waits"]]
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    path = write_results("grace_waits", config=config, results={"runs": runs}, table=table, out_dir=args.out_dir)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
