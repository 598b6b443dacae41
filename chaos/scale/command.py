"""``diloco-chaos simulate --scale``: the scale simulator from the command line.

    diloco-chaos simulate --scale --chips 2.4M --mode decoupled --learners 8
    diloco-chaos simulate --scale plan.yaml --compare --budget 1T
    diloco-chaos simulate --scale results.json              # replay what --json recorded
    diloco-chaos simulate --scale --chips 1k --duration 1h --timeline run.png
    diloco-chaos simulate --scale --sweep network.bandwidth=1,2,5 --compare --plot bw.png

A plan file (YAML, :class:`~chaos.scale.config.ScaleConfig`) and the flags
combine: flags and ``--set a.b=value`` override the file. ``--compare`` runs
data-parallel (without and with elasticity), synchronous DiLoCo and Decoupled
DiLoCo on the same chips, failures and links and prints them side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from chaos.errors import ScenarioError
from chaos.json_output import STDOUT, add_json_argument, emit_json

# flag -> plan field it overrides
FLAG_FIELDS: dict[str, str] = {
    "chips": "cluster.chips",
    "sites": "cluster.sites",
    "learners": "algorithm.num_learners",
    "mode": "algorithm.mode",
    "mtbi": "failures.mtbi_per_chip",
    "duration": "duration",
    "budget": "token_budget",
    "step": "workload.step_s",
    "tokens_per_step": "workload.tokens_per_step",
    "params": "workload.params",
    "bytes_per_param": "workload.bytes_per_param",
    "bandwidth": "network.bandwidth",
    "latency": "network.latency",
    "elastic": "elastic",
}


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scale simulator (with --scale; SCENARIO is then an optional plan file)")
    g.add_argument(
        "--scale", action="store_true", help="simulate goodput at data-centre scale instead of a scenario"
    )
    g.add_argument("--chips", help="chips in all, e.g. 2.4M")
    g.add_argument("--learners", help="M (data-parallel: 1)")
    g.add_argument("--mode", choices=["data-parallel", "sync-diloco", "decoupled"])
    g.add_argument(
        "--elastic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="data-parallel: elastic job; DiLoCo: learners elastic inside (default: on)",
    )
    g.add_argument("--mtbi", help="mean time between interruptions per chip, e.g. 1y (0: no failures)")
    g.add_argument("--duration", help="simulated time, e.g. 7d")
    g.add_argument("--budget", help="token budget, e.g. 1T (the run stops there)")
    g.add_argument("--step", help="seconds of one inner step")
    g.add_argument("--tokens-per-step", help="global batch in tokens")
    g.add_argument("--params", help="model parameters, e.g. 12B")
    g.add_argument("--bytes-per-param", help="on the wire: 2 (bf16), 0.5 (4-bit)")
    g.add_argument("--sites", help="datacentres")
    g.add_argument("--bandwidth", help="Gbit/s of each cross-site link, e.g. 5Gbps (0: unlimited)")
    g.add_argument("--latency", help="one-way link latency, e.g. 30ms")
    g.add_argument(
        "--compare",
        action="store_true",
        help="run data-parallel (both), sync DiLoCo and Decoupled DiLoCo side by side",
    )
    g.add_argument(
        "--sweep",
        metavar="FIELD=V1,V2,...",
        help="run the plan once per value of one field, e.g. cluster.chips=150k,600k,2.4M",
    )
    g.add_argument("--plot", metavar="PNG", help="with --sweep: goodput against the swept values")
    add_json_argument(g, "the results (or, without --scale, the report)")
    g.add_argument("--timeline", metavar="PNG", help="draw the run's timeline (short runs; not with --compare)")
    g.add_argument("--quiet", action="store_true", help="no progress display")
    g.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help="processes for Decoupled DiLoCo's fragments, simulated at once with the same results "
        "(default: the cores this process may use)",
    )


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--workers takes a whole number of processes, 1 or more, not {text!r}")
    return n


SCALE_ONLY = (*FLAG_FIELDS, "compare", "sweep", "plot", "timeline", "quiet", "workers")  # --json: both modes


def scale_only_flags(args: argparse.Namespace) -> list[str]:
    """The scale-simulator flags given (as ``--flag``), for refusing them without ``--scale``."""
    return [f"--{k.replace('_', '-')}" for k in SCALE_ONLY if getattr(args, k, None) not in (None, False)]


def _plan(args: argparse.Namespace, extra: list[str] | None = None) -> Any:
    from chaos.scale.config import build_scale_config, load_scale_config

    overrides = [
        f"{FLAG_FIELDS[k]}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in vars(args).items()
        if k in FLAG_FIELDS and v is not None
    ]
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    overrides += args.set + (extra or [])
    if args.scenario:
        return load_scale_config(args.scenario, overrides)
    return build_scale_config({}, "command line", overrides)


def _sweep(spec: str | None) -> tuple[str | None, list[str]]:
    """``field=v1,v2`` -> (field, [v1, v2]); no sweep -> (None, [""])."""
    if spec is None:
        return None, [""]
    field, _, values = spec.partition("=")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not field.strip() or not items:
        raise ScenarioError(f"--sweep {spec!r}: expected FIELD=V1,V2,..., e.g. cluster.chips=150k,600k,2.4M")
    return field.strip(), items


class _Progress:
    """A one-line progress display on a terminal; a few plain lines otherwise (logs, CI)."""

    def __init__(self, label: str, quiet: bool) -> None:
        self.label, self.quiet = label, quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.shown = -1

    def __call__(self, stage: str, fraction: float) -> None:
        if self.quiet or (stage == "failures" and not self.tty):
            return
        pct = int(fraction * 100)
        if self.tty:
            bar = "#" * (pct // 5) + "." * (20 - pct // 5)
            end = "\n" if stage == "done" else ""
            print(
                f"\r{self.label:38s} [{bar}] {pct:3d}% {stage:9s} {time.monotonic() - self.t0:5.1f}s",
                end=end,
                file=sys.stderr,
                flush=True,
            )
        elif stage == "done" or pct // 25 > self.shown:
            self.shown = pct // 25
            print(f"{self.label}: {stage} {pct}% ({time.monotonic() - self.t0:.1f}s)", file=sys.stderr, flush=True)


def run_scale_command(args: argparse.Namespace) -> int:
    from chaos.scale.compare import results_table, sweep_table, variants
    from chaos.scale.engine import simulate_scale
    from chaos.scale.plots import plot_goodput_sweep, plot_timeline
    from chaos.scale.quantities import format_count, format_duration

    field, values = _sweep(args.sweep)
    if getattr(args, "junit", None):
        raise ScenarioError("--junit writes a scenario run's checks; the scale simulator has none (use --json)")
    if args.compare and args.timeline:
        raise ScenarioError("--timeline draws one run: leave out --compare")
    if field and args.timeline:
        raise ScenarioError("--timeline draws one run: leave out --sweep")
    if args.plot and not field:
        raise ScenarioError("--plot draws goodput against a swept field: add --sweep FIELD=V1,V2,...")
    cfg = _plan(args)
    f = cfg.failures
    mtbi = "no random failures" if f.mtbi_per_chip <= 0 else f"MTBI {format_duration(f.mtbi_per_chip)} per chip"
    print(
        f"plan {cfg.name}: {format_count(cfg.cluster.chips)} chips, {mtbi}, "
        f"{len(f.schedule)} scheduled failure(s), {format_duration(cfg.duration)} simulated, seed {cfg.seed}"
        + (f"; sweeping {field} over {', '.join(values)}" if field else "")
    )
    workers = args.workers or len(os.sched_getaffinity(0))
    grid = []  # one list of results per swept value
    for value in values:
        base = _plan(args, [f"{field}={value}"]) if field else cfg
        results = []
        for plan in variants(base) if args.compare else [base]:
            label = plan.algorithm.mode + (
                "" if plan.algorithm.mode == "data-parallel" else f" M={plan.algorithm.num_learners}"
            )
            results.append(
                simulate_scale(
                    plan,
                    timeline=bool(args.timeline),
                    progress=_Progress(f"{label}{f' {field}={value}' if field else ''}", args.quiet),
                    workers=workers,
                )
            )
        grid.append(results)
    if field:
        print(sweep_table(field, values, grid))
    elif args.compare:
        print(results_table(grid[0]))
    else:
        print(grid[0][0].summary())
    if args.timeline:
        print(f"timeline: {plot_timeline(grid[0][0], Path(args.timeline))}")
    if args.plot:
        series = {r.label: [100 * grid[i][j].goodput for i in range(len(values))] for j, r in enumerate(grid[0])}
        print(f"plot: {plot_goodput_sweep(series, values, Path(args.plot), xlabel=field or '')}")
    if args.json:
        emit_json(
            args.json,
            {
                "plan": cfg.model_dump(mode="json"),
                "sweep": {"field": field, "values": values} if field else None,
                "results": [r.to_json() for results in grid for r in results],
            },
        )
        if args.json != STDOUT:
            print(f"results: {args.json}")
    return 0
