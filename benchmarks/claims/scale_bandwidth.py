"""The bandwidth claim: a 12B model across four sites over 2–5 Gbit/s links, simulated.

The paper: a 12B model trained across four regions over 2–5 Gbps finished
more than 20× faster than conventional synchronous training, because
communication is folded into computation instead of blocking; the
cross-datacenter need drops from ~198 Gbps (data-parallel) to ~0.84 Gbps.

    .venv/bin/python -m benchmarks.claims.scale_bandwidth [--budget 20B] [--step 2.5]

Assumptions (the paper publishes none of these; each is a flag):

- 12B parameters; a 4M-token global batch; 1,024 chips, 256 per site, at 40%
  of 275 TFLOP/s: 6 × 12e9 × 4e6 FLOP / (1,024 × 110e12 FLOP/s) ≈ 2.5 s a step.
- Data-parallel: one job over the four sites, bf16 gradients all-reduced every
  step over a ring of the sites' links; half of each step (the backward pass)
  can hide communication. Synchronous DiLoCo: M = 4 (a learner per site),
  H = 24, the whole bf16 model up to the syncer and back every round.
- Decoupled DiLoCo: M = 4, P = H = 24, τ = 2; fragments in bf16, and in 4 bits
  (the paper: 4-bit outer gradients were nearly lossless).
- 30 ms one-way latency; failures at one per chip-year (a handful at this size).

Reports, per bandwidth: time to the token budget (merged tokens) for each mode
and the speed-up over data-parallel, goodput (chip time spent computing) and
merged goodput (computed work that reached the global model: a saturated link
makes learners skip syncs, and the late replies overwrite more local steps),
plus the link bandwidth each mode needs to hide its communication. Writes
``benchmarks/results/scale_bandwidth.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.common import markdown_table, write_results
from chaos.scale import ScaleResult, build_scale_config, simulate_scale
from chaos.scale.quantities import format_duration, parse_count


def plan(
    args: argparse.Namespace, gbps: float, mode: str, bytes_per_param: float, variant: dict[str, Any] | None = None
) -> dict[str, Any]:
    alg: dict[str, Any] = {"mode": mode}
    if mode == "decoupled":
        alg.update(
            {
                "num_learners": args.sites,
                "num_fragments": 24,
                "sync_every": 24,
                "overlap_steps": 2,
                **(variant or {}),
            }
        )
    elif mode == "sync-diloco":
        alg.update(num_learners=args.sites, num_fragments=24, sync_every=24)
    # Long enough for the slowest mode to reach the budget; Decoupled gets less (it simulates every sync).
    duration = 8 * args.budget / args.tokens_per_step * args.step if mode == "decoupled" else "60d"
    return {
        "name": f"{mode}@{gbps:g}Gbps",
        "seed": args.seed,
        "duration": duration,
        "token_budget": args.budget,
        "cluster": {"chips": args.chips, "sites": args.sites},
        "workload": {
            "step_s": args.step,
            "tokens_per_step": args.tokens_per_step,
            "params": args.params,
            "bytes_per_param": bytes_per_param,
        },
        "network": {"bandwidth": gbps, "latency": args.latency, "dp_overlap": 0.5},
        "algorithm": alg,
    }


# (label, mode, bytes per parameter, decoupled algorithm settings). The plain rows refuse a late upload ("a late
# fragment simply misses that merge") with the paper's τ = 2; carrying late uploads into the next round and τ
# sized to the measured round trip (overlap_steps: auto, the trainer's default) are measured beside them.
VARIANTS: tuple[tuple[str, str, float, dict[str, Any]], ...] = (
    ("data-parallel", "data-parallel", 2.0, {}),
    ("sync DiLoCo", "sync-diloco", 2.0, {}),
    ("decoupled (bf16)", "decoupled", 2.0, {}),
    ("decoupled (bf16, late carried)", "decoupled", 2.0, {"late_uploads": "carry"}),
    ("decoupled (bf16, τ auto)", "decoupled", 2.0, {"overlap_steps": "auto"}),
    (
        "decoupled (bf16, τ auto, late carried)",
        "decoupled",
        2.0,
        {"overlap_steps": "auto", "late_uploads": "carry"},
    ),
    ("decoupled (4-bit)", "decoupled", 0.5, {}),
)


def needed_gbps(args: argparse.Namespace) -> dict[str, float]:
    """Link bandwidth at which each mode's communication hides entirely behind compute."""
    model = args.params * 2
    dp = 2 * (args.sites - 1) / args.sites * model * 8 / (0.5 * args.step) / 1e9
    frag_period = 24 / 24 * args.step  # one fragment sync per step (P = H)
    return {
        "data-parallel (bf16)": dp,
        "decoupled (bf16)": model / 24 * 8 / frag_period / 1e9,
        "decoupled (4-bit)": args.params * 0.5 / 24 * 8 / frag_period / 1e9,
    }


def simulate_runs(args: argparse.Namespace) -> list[tuple[float, dict[str, ScaleResult]]]:
    """Every variant's run at each link speed of ``args.gbps``: (Gbit/s, results by label)."""
    out = []
    for gbps in [float(g) for g in args.gbps.split(",")]:
        runs = {
            label: simulate_scale(
                build_scale_config(plan(args, gbps, mode, bpp, variant), f"{label} at {gbps:g} Gbps")
            )
            for label, mode, bpp, variant in VARIANTS
        }
        out.append((gbps, runs))
    return out


def result_rows(simulated: list[tuple[float, dict[str, ScaleResult]]]) -> list[dict[str, Any]]:
    """The results file's runs: one per link speed and variant, its figures beside them."""
    return [{"gbps": gbps, "label": label, **r.to_json()} for gbps, runs in simulated for label, r in runs.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gbps", default="2,5", help="link bandwidths to simulate, comma-separated")
    ap.add_argument("--budget", type=parse_count, default=parse_count("20B"), help="tokens to train")
    ap.add_argument("--params", type=parse_count, default=parse_count("12B"))
    ap.add_argument("--chips", type=parse_count, default=1024)
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--step", type=float, default=2.5, help="seconds of compute per step")
    ap.add_argument("--tokens-per-step", type=parse_count, default=parse_count("4M"))
    ap.add_argument("--latency", default="30ms")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows: list[list[Any]] = []
    simulated = simulate_runs(args)
    results = result_rows(simulated)
    for gbps, runs in simulated:
        dp = runs["data-parallel"].time_to_budget_s
        for label, r in runs.items():
            t = r.time_to_budget_s
            rows.append(
                [
                    f"{gbps:g}",
                    label,
                    "—" if t is None else format_duration(t),
                    "—" if t is None or dp is None else f"{dp / t:.1f}×",
                    f"{r.goodput:.1%}",
                    f"{r.merged_goodput:.1%}",
                    format_duration(r.longest_stall_s),
                    int(r.details.get("skipped_syncs", 0)),
                    f"{r.details['participants_per_merge']:.2f}" if "participants_per_merge" in r.details else "—",
                    int(r.details.get("refused_late", 0)),
                    int(r.details.get("late_carried", 0)),
                ]
            )
    table = markdown_table(
        [
            "Gbit/s",
            "mode",
            f"time to {args.budget:.3g} tokens",
            "speed-up vs data-parallel",
            "goodput",
            "merged goodput",
            "longest global stall",
            "skipped fragment syncs",
            "learners / merge",
            "refused late",
            "carried late",
        ],
        rows,
    )
    need = needed_gbps(args)
    need_table = markdown_table(
        ["mode", "Gbit/s per link to hide communication"], [[k, f"{v:.2f}"] for k, v in need.items()]
    )
    print(table)
    print()
    print(need_table)
    write_results(
        "scale_bandwidth",
        config=vars(args),
        results={"runs": results, "needed_gbps": need},
        table=table + "\n\n" + need_table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
