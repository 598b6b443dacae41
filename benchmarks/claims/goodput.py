"""Goodput under failures: synchronous DiLoCo against Decoupled DiLoCo, the same seeded failures for both.

The paper reports 88% goodput for Decoupled DiLoCo (M = 8, 1.2M chips, one
interruption per chip-year) where elastic data-parallel training gets 58%,
at the same model quality.

    .venv/bin/python -m benchmarks.claims.goodput [--mtbf-s 30] [--downtime-s 3] [--budget 1500000] [--seed 0]

Setup (defaults): M = 4 learners of the tiny model, P = 4 fragments, H = 32,
emulated 50 ms steps (``benchmarks/harness.py``), every learner killed by a
seeded exponential failure process with a mean of 30 s between failures per
learner and restarted 3 s later (``benchmarks/failures.py``), so a run of
about a minute sees several failures; the plan is drawn once and both modes
get the same kills at the same times after their first merge. Runs: each mode
fault-free and with failures, with its defaults.

Columns (definitions in ``benchmarks/measures.py``):

- **failures**: kills that happened before the run ended;
- **merged goodput** (the paper's goodput, counting merged work only): merged
  learner time over allocated learner time, merged tokens / (M × wall × nominal
  tokens per learner-second);
- **compute goodput**: the fraction of the tokens learners trained whose
  training reached a merge (issue's wording: "fraction of learner compute
  that ended up in merges");
- **longest stall**: the longest stretch with no merge at all;
- **wall**: first inner step to last merge; **final loss** and its difference
  to the same mode's fault-free run.

Prints a table, writes ``benchmarks/results/goodput.json`` and ``goodput.png``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import measures as m
from benchmarks.common import markdown_table, write_results
from benchmarks.failures import FailurePlan, exponential_kills
from benchmarks.harness import (
    add_run_arguments,
    config_of,
    plot_loss_and_goodput,
    quiet_progress,
    run_cluster,
)
from chaos.history import FaultOp, History
from trainer.config import build_config, learner_ids
from trainer.training import TrainingSetup


def cluster(args: argparse.Namespace, mode: str, **algo: Any) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "token_budget": args.budget,
        "model": {"size": args.size},
        "inner": {"batch_size": args.batch, "lr": args.lr},
        "algorithm": {
            "mode": mode,
            "num_learners": args.learners,
            "num_fragments": args.fragments,
            "sync_every": args.sync_every,
            **algo,
        },
        "syncer": {"checkpoint_every_merges": 200, "eval_every_merges": args.fragments * 4},
        "learner": {"step_delay_s": args.step_s, "start_together_s": 60.0},
    }


def nominal_rate(args: argparse.Namespace) -> float:
    """Tokens one learner trains per second when it never waits."""
    setup = TrainingSetup.from_config(build_config(cluster(args, "decoupled")))
    return setup.tokens_per_step / args.step_s


def summarise(
    label: str, h: History, args: argparse.Namespace, plan: FailurePlan | None, reference_loss: float | None
) -> dict[str, Any]:
    t0, t1 = m.training_start(h.events), m.training_end(h.events)
    assert t0 is not None and t1 is not None, f"{label}: the run trained nothing"
    g = m.goodput(
        h.events,
        num_fragments=args.fragments,
        nominal_tokens_per_s=args.learners * nominal_rate(args),
        t0=t0,
        t1=t1,
    )
    kills = sum(1 for r in h.records if isinstance(r, FaultOp) and r.action == "inject" and r.outcome == "ok")
    final = m.final_eval_loss(h.events)
    return {
        "label": label,
        "failures": kills if plan else 0,
        "goodput": g.to_json(),
        "longest_stall_s": round(m.longest_stall(h.events, t0, t1), 2),
        "wall_s": round(t1 - t0, 2),
        "final_loss": final,
        "loss_vs_fault_free": (final - reference_loss)
        if final is not None and reference_loss is not None
        else None,
        "curve": m.eval_curve(h.events, t0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(ap)
    ap.add_argument("--budget", type=int, default=1_500_000, help="tokens per run")
    ap.add_argument("--mtbf-s", type=float, default=30.0, help="mean time between failures of one learner")
    ap.add_argument("--downtime-s", type=float, default=3.0, help="seconds from a kill to the restart")
    ap.add_argument("--horizon-s", type=float, default=300.0, help="failures are drawn over this many seconds")
    args = ap.parse_args(argv)

    ids = learner_ids(args.learners)
    plan = exponential_kills(
        learners=ids, mtbf_s=args.mtbf_s, downtime_s=args.downtime_s, horizon_s=args.horizon_s, seed=args.seed
    )
    print(
        f"failure plan (seed {args.seed}): {len(plan.failures)} kills over {args.horizon_s:.0f} s, "
        f"{plan.dropped} dropped; first: " + ", ".join(f"{f.learner}@{f.at:.1f}s" for f in plan.failures[:6]),
        flush=True,
    )
    variants: list[tuple[str, str, dict[str, Any], str]] = [
        ("sync DiLoCo", "sync-diloco", {}, "sync"),
        ("decoupled (defaults)", "decoupled", {}, "decoupled"),
    ]
    rows_json: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        for label, mode, algo, slug in variants:
            free = run_cluster(
                f"{slug}-free",
                cluster(args, mode, **algo),
                root,
                seed=args.seed,
                progress=quiet_progress,
                reuse=args.reuse,
            )
            ref = summarise(f"{label}, fault-free", free, args, None, None)
            faulty = run_cluster(
                f"{slug}-failures",
                cluster(args, mode, **algo),
                root,
                schedule=plan.specs(),
                seed=args.seed,
                progress=quiet_progress,
                reuse=args.reuse,
            )
            rows_json += [ref, summarise(f"{label}, failures", faulty, args, plan, ref["final_loss"])]

    header = [
        "run",
        "failures",
        "merged goodput",
        "compute goodput",
        "longest stall (s)",
        "wall (s)",
        "final loss",
        "Δ loss vs fault-free",
    ]
    rows = [
        [
            r["label"],
            r["failures"],
            r["goodput"]["merged"],
            r["goodput"]["compute"],
            r["longest_stall_s"],
            r["wall_s"],
            r["final_loss"],
            r["loss_vs_fault_free"],
        ]
        for r in rows_json
    ]
    table = markdown_table(header, rows)
    print(f"\n{table}")
    config = config_of(args)
    config["failure_plan"] = plan.specs()
    config["failures_dropped"] = plan.dropped
    path = write_results("goodput", config=config, results={"runs": rows_json}, table=table, out_dir=args.out_dir)
    plot_loss_and_goodput(rows_json, "goodput", args.out_dir, x="time")
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
