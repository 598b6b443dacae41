"""Parity's false-alarm rate: fault-free runs judged as if they were chaos runs, by one baseline and by the band.

A fault-free run has nothing to find, so every parity failure on one is a false alarm. This runs a no-op
scenario (the built-ins' cluster, empty schedule) N times, optionally under CPU load (benchmarks.load.CpuLoad, seed i
for run i), and judges each run's final eval loss two ways, side by side:

- one baseline: within ``tolerance`` of the fault-free run at the same seed (what parity did before bands);
- the band: within ``tolerance`` of this run's floor + [min, max] of the excess over their own floors of the
  fault-free runs at ``--baseline-seeds`` cluster seeds (chaos.checkers.parity, what every report now uses).

    .venv/bin/python -m benchmarks.calibration.parity_false_alarm [--runs 8] [--load] [--baseline-seeds 3]
    .venv/bin/python -m benchmarks.calibration.parity_false_alarm --rejudge benchmarks/results/parity_false_alarm.json

Prints false alarms per tolerance with a 95 % Wilson interval, writes ``benchmarks/results/parity_false_alarm.json``.
The baselines are computed by the first run, under the same load as the runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import markdown_table, write_results
from benchmarks.load import CpuLoad
from chaos.false_alarm import alarms, cluster_key, wilson

TOLERANCES = (0.005, 0.01, 0.02, 0.05)


def no_op_scenario(baseline_seeds: int):
    """The built-ins' cluster with an empty schedule: nothing to find, so every parity failure is a false alarm."""
    from chaos.scenario import scenario_with

    return scenario_with(
        "kill-one-learner",
        name="no-op",
        schedule=[],
        checks={"parity": {"baseline_seeds": baseline_seeds}, "reintegration": {"enabled": False}},
    )


def main(argv: list[str] | None = None) -> int:
    from chaos.controller import RunOptions, run_scenario

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--baseline-seeds", type=int, default=3)
    ap.add_argument(
        "--load", action="store_true", help="every run (and the baselines) under benchmarks.load.CpuLoad"
    )
    ap.add_argument("--keep-runs", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--rejudge", type=Path, help="judge the runs of an earlier results file again (no new runs)")
    args = ap.parse_args(argv)
    if args.rejudge:
        doc = json.loads(args.rejudge.read_text())
        return _judge(
            doc["results"]["band"],
            doc["results"]["runs"],
            {**doc["config"], "rejudged": True},
            args.out_dir,
            doc["results"].get("cluster"),
        )
    if args.runs < 1:
        ap.error("--runs must be at least 1")  # the band and the median _judge prints need a run
    scenario = no_op_scenario(args.baseline_seeds)
    rows_runs, band = [], None
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        for i in range(args.runs):
            t = time.monotonic()
            with CpuLoad(seed=i) if args.load else contextlib.nullcontext():
                r = run_scenario(
                    scenario, RunOptions(root / f"run-{i}", baseline_cache=root / "baselines", progress=None)
                )
            p = next(v for v in r.verdicts if v.name == "parity").evidence
            run_band = p["band"]
            assert isinstance(run_band, dict)  # the parity checker's evidence: where the run lies in the band
            seeds = r.report.baseline.band if r.report.baseline else None  # parity ran: its baseline has a band
            band = {
                **run_band,
                **(seeds.model_dump() if seeds else {}),
            }  # where it lies; the seeds' losses, floors
            rows_runs.append(
                {
                    "run": i,
                    "final_eval_loss": p["final_eval_loss"],
                    "delta_same_seed": p["delta"],
                    "outside_band": p["outside_band"],
                    "seconds": round(time.monotonic() - t, 1),
                }
            )
            print(f"  run {i}: {rows_runs[-1]}", flush=True)
    assert band is not None  # set by every run, and there is at least one
    return _judge(band, rows_runs, vars(args), args.out_dir, cluster_key(scenario.cluster))


def _judge(band: dict, runs: list[dict], config: dict, out_dir: Path, cluster: str | None) -> int:
    single = [r["delta_same_seed"] for r in runs]
    banded = [r["outside_band"] for r in runs]
    # the cluster measured (chaos.false_alarm.cluster_key): a report on another says the rate is not its own
    by_tolerance: dict[str, dict[str, int]] = {}
    rows, results = [], {"band": band, "runs": runs, "by_tolerance": by_tolerance, "cluster": cluster}
    n = len(single)
    for tol in TOLERANCES:
        a1, a2 = alarms(single, tol), alarms(banded, tol)
        (l1, h1), (l2, h2) = wilson(a1, n), wilson(a2, n)
        by_tolerance[str(tol)] = {"one_baseline": a1, "band": a2, "runs": n}
        rows.append([f"±{tol}", f"{a1}/{n} ({l1:.0%}–{h1:.0%})", f"{a2}/{n} ({l2:.0%}–{h2:.0%})"])
    table = markdown_table(
        ["tolerance", "false alarms, one baseline (95% CI)", "false alarms, band (95% CI)"], rows
    )
    abs_single = sorted(abs(d) for d in single)
    print(
        f"\nno-op scenario, {n} fault-free runs{' under load' if config['load'] else ''}; baselines at "
        f"{config['baseline_seeds']} seeds: final losses {min(band['losses']):.4f}–{max(band['losses']):.4f}, excess over "
        f"their floors {min(band['excess']):.4f}–{max(band['excess']):.4f}, so the band is "
        f"{band['low']:.4f}–{band['high']:.4f}; median |run − same-seed baseline| {abs_single[n // 2]:.4f}"
        f"\n\n{table}"
    )
    path = write_results("parity_false_alarm", config=config, results=results, table=table, out_dir=out_dir)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
