"""Parity paired by seed, measured: timing replicates at the chaos run's own cluster seed against the seed band.

Parity today judges a run against fault-free runs at several cluster seeds (the band, chaos.checkers.parity): each
seed draws its own data, init and entropy floor, so the band's spread holds the seeds' differences as well as the
run-to-run noise, and its tolerance (a 99% prediction bound from 3 runs) is wide. Pairing would compare the run with
fault-free runs at *its own* cluster seed that differ only in timing (deterministic mode: another scenario seed,
which draws the step-time jitter; real runs: the machine's own nondeterminism), whose spread is the noise alone.

For every built-in at cluster seeds 0..N-1 in deterministic mode this judges the same chaos run both ways, side by
side: the band's verdict and minimum detectable effect as the check reports them, and the paired ones from
``--replicates`` timing replicates (tolerance t(n−1, 0.995) · sd · √(1 + 1/n), chaos.checkers.parity.
derived_tolerance). A paired verdict that fails a healthy run is a false alarm.

    .venv/bin/python -m benchmarks.calibration.parity_pairing [--seeds 5] [--replicates 3]

Writes ``benchmarks/results/parity_pairing.json``.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.common import fmt, markdown_table, write_results

REPLICATE_STRIDE = 1000  # replicate k of cluster seed s runs at scenario seed s + k · stride (timing only)


def main(argv: list[str] | None = None) -> int:
    from chaos.checkers.parity import band_distance, derived_tolerance
    from chaos.scenario import builtin_scenarios, scenario_with
    from chaos.sim import SimOptions, simulate
    from chaos.sim.runner import baseline_loss
    from trainer import events as ev

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--replicates", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    for name in sorted(builtin_scenarios()):
        for seed in range(args.seeds):
            s = scenario_with(name, seed=seed, cluster={"seed": seed})
            opts = SimOptions(step_time_s=SimOptions().step_time_s + s.cluster.learner.step_delay_s)
            r = simulate(s, opts)
            loss = next(e.loss for e in r.history.of(ev.Eval) if e.final)
            band = next(v for v in r.verdicts if v.name == "parity")
            reps = [
                baseline_loss(scenario_with(name, seed=seed + REPLICATE_STRIDE * k, cluster={"seed": seed}), opts)
                for k in range(1, args.replicates + 1)
            ]
            done = [x for x in reps if x is not None]
            assert len(done) == len(reps), f"{name} seed {seed}: a replicate did not finish"
            tol = derived_tolerance([float(x) for x in done])
            assert tol is not None, f"{name} seed {seed}: fewer than 3 replicates"
            out = band_distance(loss, (min(done), max(done)))
            rows.append(
                {
                    "scenario": name,
                    "seed": seed,
                    "final_loss": loss,
                    "replicates": reps,
                    "paired_tolerance": tol,
                    "paired_outside": out,
                    "paired_ratio": abs(out) / tol,
                    "paired_mde": max(done) + tol - min(done),
                    "band_status": band.status,
                    "band_mde": band.evidence["min_detectable_increase"],
                }
            )
            print(
                f"{name:22s} {seed} paired {abs(out) / tol:.2f} of its tolerance {tol:.4f}, mde {rows[-1]['paired_mde']:.4f}"
                f" | band {band.status}, mde {rows[-1]['band_mde']:.4f}",
                flush=True,
            )
    n = len(rows)
    summary = {
        "runs": n,
        "paired_false_alarms": sum(r["paired_ratio"] > 1 for r in rows),
        "band_false_alarms": sum(r["band_status"] != "pass" for r in rows),
        "paired_mde_median": statistics.median(r["paired_mde"] for r in rows),
        "band_mde_median": statistics.median(r["band_mde"] for r in rows),
    }
    table = markdown_table(
        ("judged by", "false alarms (healthy runs failed)", "median minimum detectable effect (nats)"),
        [
            (
                "the seed band (today)",
                f"{summary['band_false_alarms']} of {n}",
                fmt(summary["band_mde_median"], 4),
            ),
            (
                f"paired: {args.replicates} timing replicates at the run's seed",
                f"{summary['paired_false_alarms']} of {n}",
                fmt(summary["paired_mde_median"], 4),
            ),
        ],
    )
    print(table)
    write_results(
        "parity_pairing",
        config={
            "seeds": args.seeds,
            "replicates": args.replicates,
            "mode": "deterministic",
            "replicate_stride": REPLICATE_STRIDE,
        },
        results={"summary": summary, "runs": rows},
        table=table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
