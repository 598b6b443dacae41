"""Heterogeneous learners: half of them at half speed; minimum quorum K = M, K = 1, and K = 1 with the grace window.

The paper (4 fast + 4 slower learners, ~18% speed gap plus 10% variance):
K = 8 gets 84% goodput at 54.4 text-eval; K = 1 gets 100% goodput but only
51.4; K = 1 with the grace window keeps 100% goodput *and* 55.3: the grace
window is what lets slow learners' fragments into merges.

    .venv/bin/python -m benchmarks.heterogeneous [--slow-factor 2] [--budget 1200000] [--seed 0]

Setup (defaults): M = 4 learners of the tiny model, P = 4 fragments, H = 32,
emulated steps (``benchmarks/harness.py``): learners 0 and 1 take 100 ms per
step, learners 2 and 3 take 50 ms, no faults. Runs: Decoupled DiLoCo with
K = M (no grace), K = 1 without grace, K = 1 with grace (the default), the
last also as tuned (``benchmarks.harness.TUNED_DECOUPLED``), and a reference with every learner
fast (K = 1 with grace). Same token budget (all learners together) for every
run, so the final losses compare at equal data.

Columns: time goodput (useful learner time over allocated learner time, with
each learner's own nominal speed), compute goodput (trained tokens that
reached a merge), participants per merge, the fraction of the slow and of the
fast learners' uploads that were merged, wall time and final eval loss.
Prints a table, writes ``benchmarks/results/heterogeneous.json`` and
``heterogeneous.png``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import measures as m
from benchmarks.common import markdown_table, write_results
from benchmarks.harness import (
    TUNED_DECOUPLED,
    TUNED_LABEL,
    add_run_arguments,
    config_of,
    plot_loss_and_goodput,
    quiet_progress,
    run_cluster,
)
from chaos.history import History
from trainer.config import build_config
from trainer.launch import learner_ids
from trainer.training import TrainingSetup


def cluster(args: argparse.Namespace, slow: list[str], **algo: Any) -> dict[str, Any]:
    return {"seed": args.seed, "token_budget": args.budget, "model": {"size": args.size},
            "inner": {"batch_size": args.batch, "lr": args.lr},
            "algorithm": {"mode": "decoupled", "num_learners": args.learners, "num_fragments": args.fragments,
                          "sync_every": args.sync_every, **algo},
            "syncer": {"checkpoint_every_merges": 200, "eval_every_merges": args.fragments * 4},
            "learner": {"step_delay_s": args.step_s, "start_together_s": 60.0,
                        "step_delay_overrides": {lid: args.step_s * args.slow_factor for lid in slow}}}


def summarise(label: str, h: History, args: argparse.Namespace, slow: list[str]) -> dict[str, Any]:
    t0, t1 = m.training_start(h.events), m.training_end(h.events)
    assert t0 is not None and t1 is not None, f"{label}: the run trained nothing"
    per_step = TrainingSetup.from_config(build_config(cluster(args, slow))).tokens_per_step
    nominal = sum(per_step / (args.step_s * (args.slow_factor if lid in slow else 1.0))
                  for lid in learner_ids(args.learners))
    g = m.goodput(h.events, num_fragments=args.fragments, nominal_tokens_per_s=nominal, t0=t0, t1=t1)
    part = m.participation(h.events)
    fast = [lid for lid in learner_ids(args.learners) if lid not in slow]

    def share(ids: list[str]) -> float | None:
        vals = [part[lid] for lid in ids if lid in part]
        return round(statistics.mean(vals), 3) if vals else None

    return {"label": label, "goodput": g.to_json(), "per_merge": round(part["per_merge"], 2),
            "slow_merged": share(slow), "fast_merged": share(fast), "wall_s": round(t1 - t0, 2),
            "final_loss": m.final_eval_loss(h.events), "curve": m.eval_curve(h.events, t0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(ap)
    ap.add_argument("--slow-factor", type=float, default=2.0, help="a slow learner's step takes this many times longer")
    ap.add_argument("--budget", type=int, default=1_200_000)
    args = ap.parse_args(argv)

    slow = learner_ids(args.learners)[: args.learners // 2]
    m_ = args.learners
    variants: list[tuple[str, str, list[str], dict[str, Any]]] = [
        ("k-m", f"K = M = {m_}", slow, {"min_quorum": m_, "grace": False}),
        ("k-1", "K = 1, no grace", slow, {"min_quorum": 1, "grace": False}),
        ("k-1-grace", "K = 1 + grace", slow, {"min_quorum": 1, "grace": True}),
        ("k-1-grace-tuned", f"K = 1 + grace, {TUNED_LABEL}", slow,
         {"min_quorum": 1, "grace": True, **TUNED_DECOUPLED}),
        ("all-fast", "all fast, K = 1 + grace (reference)", [], {"min_quorum": 1, "grace": True}),
    ]
    rows_json: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        for slug, label, slow_ids, algo in variants:
            h = run_cluster(slug, cluster(args, slow_ids, **algo), root, seed=args.seed, progress=quiet_progress,
                            reuse=args.reuse)
            rows_json.append(summarise(label, h, args, slow_ids))
    header = ["run", "time goodput", "compute goodput", "participants / merge", "slow uploads merged",
              "fast uploads merged", "wall (s)", "final loss"]
    rows = [[r["label"], r["goodput"]["time"], r["goodput"]["compute"], r["per_merge"], r["slow_merged"],
             r["fast_merged"], r["wall_s"], r["final_loss"]] for r in rows_json]
    table = markdown_table(header, rows)
    print(f"\nslow learners {', '.join(slow)} at 1/{args.slow_factor:g} speed\n\n{table}")
    config = config_of(args)
    config["slow_learners"] = slow
    path = write_results("heterogeneous", config=config, results={"runs": rows_json}, table=table,
                         out_dir=args.out_dir)
    plot_loss_and_goodput(rows_json, "heterogeneous", args.out_dir, x="tokens")
    print(f"\nresults: {path}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
