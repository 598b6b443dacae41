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

``--backend local`` runs the same comparison with real processes (real learners training the tiny model, real
gRPC, real Toxiproxy) while busy processes hold every core (benchmarks.load.CpuLoad, seeded by the run's seed):
what deterministic mode cannot show is a learner that stalls on a loaded machine past three report intervals
and is then not waited for. Real runs keep the built-in's cluster seed (``--seeds`` seeds the schedule and the
load), run no fault-free baseline (parity is indeterminate: quality is the ablation's), and write
``grace_waits_local.json``.

Per scenario and setting, over seeds (mean ± 95% t interval where it is per run): the grace each merge that
someone was missing from waited, in steps (median and 90th percentile pooled over runs); steps waited per run
(the sum: time the merges were held back); learners per merge; uploads refused as late per run; runs any check
failed (no baseline is run, so parity is indeterminate, never failed). Its surrogate
learners say nothing about model quality: the quality ablation is ``reference_parity --only decoupled heard``.
Prints a table, writes ``benchmarks/results/grace_waits.json``; the waits are kept as counts per value rounded to
0.01 steps, enough for the table's percentiles.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import measures as m
from benchmarks.common import markdown_table, write_results
from chaos.history import History
from chaos.scenario import Scenario, scenario_with
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


def counts(waits: list[float]) -> dict[str, int]:
    """The waits as counts per value rounded to 0.01 steps (what the JSON keeps), keys sorted by value.

    >>> counts([0.991, 0.99, 0.0])
    {'0.00': 1, '0.99': 2}
    """
    c = Counter(f"{w:.2f}" for w in waits)
    return {k: c[k] for k in sorted(c, key=float)}


def run_sim(s: Scenario, seed: int, root: Path) -> tuple[History, str]:
    r = simulate(s, SimOptions(baseline=False))
    return r.history, r.status


def run_local(s: Scenario, seed: int, root: Path) -> tuple[History, str]:
    """One real chaos run of ``s`` under CPU load seeded by ``seed``; no fault-free baseline."""
    from benchmarks.load import CpuLoad
    from chaos.controller import RunOptions, run_scenario

    out = root / f"{s.name}-{s.cluster.algorithm.grace_waits_for}-seed{seed}"
    with CpuLoad(seed=seed):
        r = run_scenario(s, RunOptions(out, baseline=False, progress=None))
    return History.read(out), r.status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[200, 201, 202, 203, 204])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument(
        "--backend",
        choices=("sim", "local"),
        default="sim",
        help="sim: deterministic mode (default); local: real processes under CPU load",
    )
    ap.add_argument("--keep-runs", type=Path, default=None, help="local: keep each run's directory here")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    one_run = run_local if args.backend == "local" else run_sim
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        for name in args.scenarios:
            for setting in SETTINGS:
                for seed in args.seeds:
                    # Real runs keep the built-in's cluster seed (its trajectory is what the built-in was
                    # calibrated on); the run's seed draws the schedule and the load.
                    cluster: dict[str, Any] = {"algorithm": {"grace_waits_for": setting}}
                    if args.backend == "sim":
                        cluster["seed"] = seed
                    h, status = one_run(scenario_with(name, seed=seed, cluster=cluster), seed, root)
                    row = summarise(h)
                    row["status"] = status
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
    how = "deterministic mode" if args.backend == "sim" else "real processes under CPU load"
    print(f"\nover seeds {args.seeds}, {how}\n\n{table}")
    for by_setting in runs.values():  # the raw waits are in the table's percentiles; keep the JSON small
        for rs in by_setting.values():
            for row in rs.values():
                row["grace_waits"] = counts(row["grace_waits"])
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    name = "grace_waits" if args.backend == "sim" else "grace_waits_local"
    path = write_results(name, config=config, results={"runs": runs}, table=table, out_dir=args.out_dir)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
