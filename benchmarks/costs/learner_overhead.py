"""Learner overhead: step throughput with background syncing vs a bare JAX loop.

Both run as separate processes with the same thread limits, model and batch,
interleaved (bare, synced, bare, synced, ...) so machine noise hits both
alike; the script prints the median throughput of each and their ratio.

    .venv/bin/python -m benchmarks.costs.learner_overhead [--size tiny|small] [--repeats 3] [--steps 200]

The synced learner is a real learner process talking gRPC to a real syncer
(decoupled mode, M = 1, K = 1) that merges every fragment it receives; its
throughput is read from the learner's own ``step`` events after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import markdown_table, new_figure, save_figure, write_results
from trainer import events as ev
from trainer.config import build_config
from trainer.launch import THREAD_ENV, LocalCluster

WARMUP = 30


def bare_loop(size: str, steps: int, seed: int) -> float:
    """Steps per second of plain jitted AdamW steps (run in this process)."""
    import jax
    import jax.numpy as jnp

    from trainer.training import TrainingSetup

    setup = TrainingSetup.from_config(build_config({"model": {"size": size}, "seed": seed}))
    params = {k: jnp.asarray(v) for k, v in setup.init_params().items()}
    state = setup.optimizer.init(params)
    batches = setup.batches("learner-0", 0)
    step = setup.train_step
    t0 = 0.0
    loss: jax.Array  # bound by the first step (WARMUP > 0) before it is read
    for i in range(WARMUP + steps):
        if i == WARMUP:
            float(loss)  # noqa: F821 - drain the async queue before timing
            t0 = time.perf_counter()
        params, state, loss = step(params, state, jnp.asarray(next(batches)))
        if i % 10 == 0:
            float(loss)  # the learner syncs on the loss every few steps too
    float(loss)
    return steps / (time.perf_counter() - t0)


def _pinned(cpus: set[int] | None):
    """Pin this process (and so the children it starts next) to ``cpus``; returns the old set."""
    old = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    return old


def run_bare(size: str, steps: int, seed: int, cpus: set[int] | None) -> float:
    env = dict(os.environ, **THREAD_ENV)
    old = _pinned(cpus)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.costs.learner_overhead",
                "--bare",
                "--size",
                size,
                "--steps",
                str(steps),
                "--seed",
                str(seed),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.sched_setaffinity(0, old)
    return float(out.stdout.strip().splitlines()[-1])


def run_synced(
    size: str, steps: int, seed: int, workdir: Path, learner_cpus: set[int] | None, syncer_cpus: set[int] | None
) -> tuple[float, int]:
    cfg = build_config(
        {
            "model": {"size": size},
            "seed": seed,
            "token_budget": 10**12,
            "algorithm": {"mode": "decoupled", "num_learners": 1, "num_fragments": 4, "sync_every": 8},
            "learner": {"step_event_every": 10},
        }
    )
    cluster = LocalCluster(cfg, workdir)
    path = workdir / "events" / "learner-0.jsonl"
    try:
        old = _pinned(syncer_cpus)
        try:
            cluster.start_syncer()
            _pinned(learner_cpus)
            cluster.start_learner("learner-0")
        finally:
            os.sched_setaffinity(0, old)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            evs = (
                [e for e in ev.read_events(path, strict=False) if isinstance(e, ev.Step)] if path.exists() else []
            )
            done = [e for e in evs if e.step >= WARMUP]
            if done and done[-1].step - done[0].step >= steps:
                a, b = done[0], done[-1]
                merges = sum(
                    1
                    for e in ev.read_events(workdir / "events" / "syncer.jsonl", strict=False)
                    if isinstance(e, ev.Merge)
                )
                return (b.step - a.step) / (b.ts - a.ts), merges
            time.sleep(0.2)
        raise RuntimeError("synced learner did not make progress")
    finally:
        cluster.stop_all()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="tiny", choices=["tiny", "small"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-pin", action="store_true", help="do not pin: learner, bare loop and syncer then share every core"
    )
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args(argv)
    if args.bare:
        print(bare_loop(args.size, args.steps, args.seed))
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    # The syncer is another machine in a real deployment: give it its own core so
    # the figure is the learner's own cost of syncing, not two processes sharing one core.
    pin = not args.no_pin and len(cpus) >= 2
    learner_cpus, syncer_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (None, None)
    bare, synced, merges = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            bare.append(run_bare(args.size, args.steps, args.seed, learner_cpus))
            s, m = run_synced(args.size, args.steps, args.seed, Path(tmp) / f"run{r}", learner_cpus, syncer_cpus)
            synced.append(s)
            merges.append(m)
            print(
                f"repeat {r}: bare {bare[-1]:.1f} steps/s, synced {synced[-1]:.1f} steps/s ({m} merges)",
                flush=True,
            )
    mb, ms = statistics.median(bare), statistics.median(synced)
    table = markdown_table(
        ["model", "bare steps/s (median)", "synced steps/s (median)", "overhead"],
        [[args.size, round(mb, 1), round(ms, 1), f"{100 * (1 - ms / mb):.1f}%"]],
    )
    print(f"\n{table}")
    config = {
        "size": args.size,
        "steps": args.steps,
        "repeats": args.repeats,
        "seed": args.seed,
        "pin": pin,
        "learner_cpus": sorted(learner_cpus or cpus),
        "syncer_cpus": sorted(syncer_cpus or cpus),
    }
    results = {
        "bare_steps_per_s": bare,
        "synced_steps_per_s": synced,
        "merges": merges,
        "median_bare": mb,
        "median_synced": ms,
        "overhead": 1 - ms / mb,
    }
    out_dir = Path(args.out_dir)
    write_results("learner_overhead", config=config, results=results, table=table, out_dir=out_dir)
    fig, ax = new_figure(6, 3.5)
    ax.plot(range(1, len(bare) + 1), bare, "o-", label="bare JAX loop")
    ax.plot(range(1, len(synced) + 1), synced, "s-", label="learner, syncing in the background")
    ax.set_xlabel("repeat (interleaved)")
    ax.set_ylabel("inner steps / s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"learner overhead: {100 * (1 - ms / mb):.1f}% (medians)")
    ax.legend(fontsize=8)
    save_figure(fig, "learner_overhead", out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
