"""Heterogeneous learners: half of them at half speed; minimum quorum K = M, K = 1, and K = 1 with the grace window.

The paper (4 fast + 4 slower learners, ~18% speed gap plus 10% variance):
K = 8 gets 84% goodput at 54.4 text-eval; K = 1 gets 100% goodput but only
51.4; K = 1 with the grace window keeps 100% goodput *and* 55.3: the grace
window is what lets slow learners' fragments into merges.

    .venv/bin/python -m benchmarks.claims.heterogeneous [--slow-factor 2] [--budget 1200000] [--seeds 0 1 2 3 4]
        [--link-latency-ms 50 --link-jitter-ms 10] [--results-name heterogeneous]
    .venv/bin/python -m benchmarks.claims.heterogeneous --size small --text --step-s 1.5 --budget 1500000 \
        --seeds 100 101 102 103 104 --results-name heterogeneous_small   # the small preset on real text

On the small preset ``--step-s`` must exceed a learner's compute step on the shared cores (about 1.2 s with four
learners on 2 cores), so that the emulated speeds, not the CPU, set who is slow.

Setup (defaults): M = 4 learners of the tiny model, P = 4 fragments, H = 32,
emulated steps (``benchmarks/harness.py``): learners 0 and 1 take 100 ms per
step, learners 2 and 3 take 50 ms, no faults. Runs, per seed: Decoupled
DiLoCo with K = M (no grace), K = 1 without grace, and K = 1 with grace (the
default). Same token budget (all learners together) for every run, so the
final losses compare at equal data. Every learner syncs on the syncer's round
clock, so a slow learner covers fewer steps per round and its token weight
says so: its expected share of the merge weight is its share of the cluster's
speed (here 1/3 for the two slow learners together).

Columns, mean and 95% t interval over seeds: final eval loss, and its difference from K = 1 + grace's on the
same seed (relative, %: the paired comparison, since losses spread across seeds more than between
configurations); merged goodput (useful learner time over allocated learner time, with each learner's own
nominal speed) and its ratio to K = 1's on the same seed; participants per merge; the slow learners' share of
the merge weight against their speed share. Prints a table, writes ``benchmarks/results/<results-name>.json``.

Where uploads come from: every learner syncs at its last step boundary before
a round opens, so on a fast link every upload is at the syncer when the round
opens and K = 1 merges nearly everyone without a grace window. Over a link
with latency (``--link-latency-ms``: a Toxiproxy latency toxic on every
learner's link, each way, for the whole run) an upload lands up to the
latency after the opening, at a time set by where the learner's last step
boundary fell: arrivals spread over about one step, which is what the grace
window is for (the paper's K = 1 without grace merges only what came first).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import measures as m
from benchmarks.common import markdown_table, write_results
from benchmarks.harness import (
    add_data_arguments,
    add_run_arguments,
    config_of,
    data_of,
    link_faults,
    quiet_progress,
    run_cluster,
)
from chaos.history import History
from trainer.config import build_config, learner_ids
from trainer.training import TrainingSetup


def cluster(args: argparse.Namespace, seed: int, slow: list[str], **algo: Any) -> dict[str, Any]:
    return {
        "seed": seed,
        "token_budget": args.budget,
        "model": {"size": args.size},
        "data": data_of(args),
        "inner": {"batch_size": args.batch, "lr": args.lr},
        "algorithm": {
            "mode": "decoupled",
            "num_learners": args.learners,
            "num_fragments": args.fragments,
            "sync_every": args.sync_every,
            **algo,
        },
        "syncer": {"checkpoint_every_merges": 200, "eval_every_merges": args.fragments * 4},
        "learner": {
            "step_delay_s": args.step_s,
            "start_together_s": 60.0,
            "step_delay_overrides": {lid: args.step_s * args.slow_factor for lid in slow},
        },
    }


def summarise(h: History, args: argparse.Namespace, seed: int, slow: list[str]) -> dict[str, Any]:
    t0, t1 = m.training_start(h.events), m.training_end(h.events)
    assert t0 is not None and t1 is not None, "the run trained nothing"
    per_step = TrainingSetup.from_config(build_config(cluster(args, seed, slow))).tokens_per_step
    speeds = {lid: 1 / (args.slow_factor if lid in slow else 1.0) for lid in learner_ids(args.learners)}
    nominal = sum(per_step / args.step_s * s for s in speeds.values())
    g = m.goodput(h.events, num_fragments=args.fragments, nominal_tokens_per_s=nominal, t0=t0, t1=t1)
    return {
        "final_loss": m.final_eval_loss(h.events),
        "merged_goodput": g.merged,
        "compute_goodput": g.compute,
        "per_merge": m.participation(h.events)["per_merge"],
        "slow_weight": m.weight_share(h.events, slow),
        "slow_speed_share": sum(speeds[lid] for lid in slow) / sum(speeds.values()),
        "grace_waits": m.grace_waits(h.events),
        "late_refused": m.late_refused(h.events),
        "wall_s": t1 - t0,
    }


def all_variants(learners: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(slug, label, algorithm settings) of the configurations compared, for M = ``learners``."""
    return [
        ("k-m", f"K = M = {learners}", {"min_quorum": learners, "grace": False}),
        ("k-1", "K = 1, no grace", {"min_quorum": 1, "grace": False}),
        ("k-1-grace", "K = 1 + grace (default)", {"min_quorum": 1, "grace": True}),
        (
            "k-1-heard",
            "K = 1 + grace waiting only for learners heard lately",
            {"min_quorum": 1, "grace": True, "grace_waits_for": "heard"},
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(ap)
    add_data_arguments(ap)
    ap.add_argument(
        "--slow-factor", type=float, default=2.0, help="a slow learner's step takes this many times longer"
    )
    ap.add_argument("--budget", type=int, default=1_200_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--only", nargs="+", choices=[slug for slug, _, _ in all_variants(1)], help="run only these configurations"
    )
    ap.add_argument("--link-latency-ms", type=int, default=0, help="latency on every learner's link, each way")
    ap.add_argument("--link-jitter-ms", type=int, default=0, help="± jitter of that latency (Toxiproxy's own)")
    ap.add_argument("--results-name", default="heterogeneous", help="benchmarks/results/<this>.json")
    args = ap.parse_args(argv)

    slow = learner_ids(args.learners)[: args.learners // 2]
    variants = [v for v in all_variants(args.learners) if not args.only or v[0] in args.only]
    runs: dict[str, dict[int, dict[str, Any]]] = {slug: {} for slug, _, _ in variants}
    links = link_faults(latency_ms=args.link_latency_ms, jitter_ms=args.link_jitter_ms)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        for seed in args.seeds:
            for slug, _, algo in variants:
                h = run_cluster(
                    f"{slug}-seed{seed}",
                    cluster(args, seed, slow, **algo),
                    root,
                    seed=seed,
                    schedule=links,
                    progress=quiet_progress,
                    reuse=args.reuse,
                )
                runs[slug][seed] = summarise(h, args, seed, slow)
                print(f"  {slug} seed {seed}: {runs[slug][seed]}", flush=True)
    k1 = runs.get("k-1", {})
    default = runs.get("k-1-grace", {})
    header = [
        "run",
        "final eval loss",
        "vs K = 1 + grace, same seed (%)",
        "merged goodput",
        "÷ K = 1's merged goodput",
        "participants / merge",
        "slow learners' weight share (speed share)",
        "grace waited, steps (median; p90)",
        "late uploads refused / run",
    ]
    rows = []
    for slug, label, _ in variants:
        rs = runs[slug]
        share = rs[next(iter(rs))]["slow_speed_share"]
        rows.append(
            [
                label,
                m.format_ci([r["final_loss"] for r in rs.values()], 4),
                m.format_ci(m.paired_relative(rs, default), 2) if default and slug != "k-1-grace" else "—",
                m.format_ci([r["merged_goodput"] for r in rs.values()]),
                m.format_ci([r["merged_goodput"] / k1[s]["merged_goodput"] for s, r in rs.items() if s in k1])
                if k1
                else None,
                m.format_ci([r["per_merge"] for r in rs.values()], 2),
                f"{m.format_ci([r['slow_weight'] for r in rs.values()])} ({share:.3f})",
                m.format_median_p90([w for r in rs.values() for w in r.get("grace_waits", [])]),
                f"{sum(r.get('late_refused', 0) for r in rs.values()) / len(rs):.1f}",
            ]
        )
    table = markdown_table(header, rows)
    lat = f"; links +{args.link_latency_ms} ± {args.link_jitter_ms} ms each way" if args.link_latency_ms else ""
    print(
        f"\nslow learners {', '.join(slow)} at 1/{args.slow_factor:g} speed{lat}; mean ± 95% t interval over seeds "
        f"{args.seeds}\n\n{table}"
    )
    config = config_of(args)
    config["slow_learners"] = slow
    path = write_results(
        args.results_name, config=config, results={"runs": runs}, table=table, out_dir=args.out_dir
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
