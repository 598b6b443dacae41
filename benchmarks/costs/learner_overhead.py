"""Learner overhead: step throughput with background syncing vs a bare JAX loop.

Three sides, each its own process with the same thread limits, model and batch, interleaved (bare, bare
blocking, synced, bare, ...) so machine noise hits all alike: the bare loop as one would write it (JAX's
asynchronous dispatch, a look at the loss every 10 steps), the same loop waiting for every step (what the learner
must do: its step boundary is when it compares the syncer's clock with the round schedule and times its step),
and the learner. The script prints the median throughput of each, the learner's overhead against the bare loop,
and how it splits: the step boundary (bare against bare blocking) and the syncing (bare blocking against the
learner).

    .venv/bin/python -m benchmarks.costs.learner_overhead [--size tiny|small] [--repeats 3] [--steps 200]
    .venv/bin/python -m benchmarks.costs.learner_overhead --size small --steps 40 --results-name learner_overhead_small

The synced learner is a real learner process talking gRPC to a real syncer
(decoupled mode, M = 1, K = 1) that merges every fragment it receives; its
throughput is read from the learner's own ``step`` events after a warm-up.

Where the difference goes: each side's CPU per step by thread kind (the learner's sync threads, XLA's compute
threads, gRPC's core threads and the rest: ``THREAD_KINDS``), read from ``/proc/<pid>/task/*/stat`` over the
timed window.
"""

from __future__ import annotations

import argparse
import json
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
from trainer.learner import SYNC_THREAD_PREFIX

WARMUP = 30
SIDES = ("bare", "bare_blocking", "synced")  # interleaved in this order, each repeat
# The synced learner's algorithm: M = 1, so each fragment syncs every H steps and the learner one every H / P.
SYNC_EVERY, NUM_FRAGMENTS = 8, 4
ALGORITHM = {"mode": "decoupled", "num_learners": 1, "num_fragments": NUM_FRAGMENTS, "sync_every": SYNC_EVERY}
STEPS_PER_SYNC = SYNC_EVERY / NUM_FRAGMENTS
# Thread kinds by the name the OS knows a thread by (/proc/<pid>/task/<tid>/comm), first prefix that matches: the
# learner names its sync threads; XLA's CPU compute threads are "tf_XLAEigen", gRPC core's "event_engine"; every
# other thread is "python" (3.11 does not name them): the step loop and JAX's dispatch thread (which runs compiled
# code too, so the split between it and XLA's threads moves with how often the loop blocks). A thread inherits its
# creator's name, so the threads gRPC starts for a sync thread's call (an upload's request stream) count as sync.
THREAD_KINDS = (
    (SYNC_THREAD_PREFIX, "sync threads (upload, download, report)"),
    ("tf_XLA", "XLA compute"),
    ("event_engine", "gRPC core"),
    ("python", "step loop, JAX dispatch, other Python"),
)


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) each kind of thread of ``pid`` has used so far (threads that exited are lost:
    gRPC's per-call threads are counted only while alive, so the sync threads' figure is a lower bound)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread exited meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        kind = next((k for prefix, k in THREAD_KINDS if name.startswith(prefix)), "other")
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def per_step_ms(
    before: dict[str, float], after: dict[str, float], wall_s: float, step_s: float
) -> dict[str, float]:
    """CPU ms per step of each thread kind: its CPU rate over ``wall_s`` times the step's period ``step_s``."""
    return {k: 1000 * (after.get(k, 0.0) - before.get(k, 0.0)) / wall_s * step_s for k in sorted(after)}


def bare_loop(size: str, steps: int, seed: int, block_every_step: bool = False) -> tuple[float, dict[str, float]]:
    """Steps per second of plain jitted AdamW steps (run in this process), and its CPU ms per step by thread kind;
    ``block_every_step``: wait for each step's loss before dispatching the next, as the learner does."""
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
            cpu0 = thread_cpu_s(os.getpid())
        params, state, loss = step(params, state, jnp.asarray(next(batches)))
        if block_every_step:
            jax.block_until_ready(loss)
        if i % 10 == 0:
            float(loss)  # the learner syncs on the loss every few steps too
    float(loss)
    wall = time.perf_counter() - t0
    return steps / wall, per_step_ms(cpu0, thread_cpu_s(os.getpid()), wall, wall / steps)


def _pinned(cpus: set[int] | None):
    """Pin this process (and so the children it starts next) to ``cpus``; returns the old set."""
    old = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    return old


def run_bare(
    size: str, steps: int, seed: int, cpus: set[int] | None, block_every_step: bool = False
) -> tuple[float, dict[str, float]]:
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
                *(["--block-every-step"] if block_every_step else []),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.sched_setaffinity(0, old)
    rate, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return rate, cpu


def run_synced(
    size: str, steps: int, seed: int, workdir: Path, learner_cpus: set[int] | None, syncer_cpus: set[int] | None
) -> tuple[float, int, dict[str, float]]:
    cfg = build_config(
        {
            "model": {"size": size},
            "seed": seed,
            "token_budget": 10**12,
            "algorithm": ALGORITHM,
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
            pid = cluster.start_learner("learner-0").pid
        finally:
            os.sched_setaffinity(0, old)
        deadline = time.monotonic() + 600
        cpu0: tuple[float, dict[str, float]] | None = None  # (when, CPU by thread kind) once warm
        while time.monotonic() < deadline:
            evs = (
                [e for e in ev.read_events(path, strict=False) if isinstance(e, ev.Step)] if path.exists() else []
            )
            done = [e for e in evs if e.step >= WARMUP]
            if done and cpu0 is None:
                cpu0 = (time.monotonic(), thread_cpu_s(pid))
            if done and done[-1].step - done[0].step >= steps:
                assert cpu0 is not None
                cpu, wall = thread_cpu_s(pid), time.monotonic() - cpu0[0]
                a, b = done[0], done[-1]
                merges = sum(
                    1
                    for e in ev.read_events(workdir / "events" / "syncer.jsonl", strict=False)
                    if isinstance(e, ev.Merge)
                )
                rate = (b.step - a.step) / (b.ts - a.ts)
                return rate, merges, per_step_ms(cpu0[1], cpu, wall, 1 / rate)
            time.sleep(0.2)
        raise RuntimeError("synced learner did not make progress")
    finally:
        cluster.stop_all()


def overhead_table(size: str, bare: float, synced: float, blocking: float | None = None) -> str:
    """The headline table from the medians (steps/s to 3 significant figures: the small preset runs ~1 a second);
    with the blocking bare loop's, the overhead's two parts: 1 − s/b = (1 − b′/b) + (b′/b)·(1 − s/b′), the step
    boundary and the syncing (``b′`` the bare loop blocking every step).

    >>> print(overhead_table("small", 1.0312, 1.0101))
    | model | bare steps/s (median) | synced steps/s (median) | overhead |
    |---|---|---|---|
    | small | 1.03 | 1.01 | 2.0% |
    >>> print(overhead_table("tiny", 50.0, 44.0, blocking=48.0))
    | model | bare steps/s (median) | bare, blocking every step | synced steps/s (median) | overhead | of it: the step boundary | of it: syncing |
    |---|---|---|---|---|---|---|
    | tiny | 50 | 48 | 44 | 12.0% | 4.0% | 8.0% |
    """
    if blocking is None:
        return markdown_table(
            ["model", "bare steps/s (median)", "synced steps/s (median)", "overhead"],
            [[size, f"{bare:.3g}", f"{synced:.3g}", f"{100 * (1 - synced / bare):.1f}%"]],
        )
    boundary = 1 - blocking / bare
    return markdown_table(
        [
            "model",
            "bare steps/s (median)",
            "bare, blocking every step",
            "synced steps/s (median)",
            "overhead",
            "of it: the step boundary",
            "of it: syncing",
        ],
        [
            [
                size,
                f"{bare:.3g}",
                f"{blocking:.3g}",
                f"{synced:.3g}",
                f"{100 * (1 - synced / bare):.1f}%",
                f"{100 * boundary:.1f}%",
                f"{100 * (1 - synced / bare - boundary):.1f}%",
            ]
        ],
    )


def _fmt(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())


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
    ap.add_argument("--block-every-step", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default="benchmarks/results")
    ap.add_argument("--results-name", default="learner_overhead", help="<out-dir>/<this>.json (and its figure)")
    args = ap.parse_args(argv)
    if args.bare:
        print(json.dumps(bare_loop(args.size, args.steps, args.seed, args.block_every_step)))
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    # The syncer is another machine in a real deployment: give it its own core so
    # the figure is the learner's own cost of syncing, not two processes sharing one core.
    pin = not args.no_pin and len(cpus) >= 2
    learner_cpus, syncer_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (None, None)
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    merges: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for side, block in (("bare", False), ("bare_blocking", True)):
                rate, side_cpu = run_bare(args.size, args.steps, args.seed, learner_cpus, block)
                rates[side].append(rate)
                cpu[side].append(side_cpu)
            s, m, synced_cpu = run_synced(
                args.size, args.steps, args.seed, Path(tmp) / f"run{r}", learner_cpus, syncer_cpus
            )
            rates["synced"].append(s)
            cpu["synced"].append(synced_cpu)
            merges.append(m)
            print(
                f"repeat {r}: bare {rates['bare'][-1]:.1f} steps/s, blocking every step "
                f"{rates['bare_blocking'][-1]:.1f}, synced {s:.1f} ({m} merges); CPU ms/step "
                + "; ".join(f"{side} {_fmt(cpu[side][-1])}" for side in SIDES),
                flush=True,
            )
    med = {side: statistics.median(v) for side, v in rates.items()}
    mb, mbb, ms = med["bare"], med["bare_blocking"], med["synced"]
    table = overhead_table(args.size, mb, ms, blocking=mbb)
    kinds = sorted({k for side in cpu.values() for c in side for k in c})
    cpu_median = {
        side: {k: statistics.median(c.get(k, 0.0) for c in cs) for k in kinds} for side, cs in cpu.items()
    }
    total = {side: sum(c.values()) for side, c in cpu_median.items()}
    extra_ms = total["synced"] - total["bare_blocking"]  # syncing's own: against the loop that blocks as it does
    cpu_table = markdown_table(
        [
            "threads",
            "bare loop: CPU ms / step (median)",
            "bare, blocking every step",
            "learner",
            "learner − bare blocking",
        ],
        [
            [
                k,
                *(f"{cpu_median[side][k]:.2f}" for side in SIDES),
                f"{cpu_median['synced'][k] - cpu_median['bare_blocking'][k]:+.2f}",
            ]
            for k in kinds
        ]
        + [["all", *(f"{total[side]:.2f}" for side in SIDES), f"{extra_ms:+.2f}"]],
    )
    per_sync = (
        f"Extra CPU per sync against the loop that blocks every step (a sync every {STEPS_PER_SYNC:g} steps): "
        f"{extra_ms * STEPS_PER_SYNC:.2f} ms."
    )
    cpu_table += f"\n\n{per_sync}"
    print(f"\n{table}\n\n{cpu_table}")
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
        "bare_steps_per_s": rates["bare"],
        "bare_blocking_steps_per_s": rates["bare_blocking"],
        "synced_steps_per_s": rates["synced"],
        "merges": merges,
        "median_bare": mb,
        "median_bare_blocking": mbb,
        "median_synced": ms,
        "overhead": 1 - ms / mb,
        "step_boundary": 1 - mbb / mb,  # of the overhead: waiting for every step
        "syncing": mbb / mb - ms / mb,  # of the overhead: the rest
        "cpu_ms_per_step": cpu,
        "cpu_ms_per_step_median": cpu_median,
        "cpu_table": cpu_table,
        "steps_per_sync": STEPS_PER_SYNC,
        "extra_cpu_ms_per_sync": extra_ms * STEPS_PER_SYNC,
    }
    out_dir = Path(args.out_dir)
    write_results(args.results_name, config=config, results=results, table=table, out_dir=out_dir)
    fig, ax = new_figure(6, 3.5)
    for side, marker, label in (
        ("bare", "o-", "bare JAX loop"),
        ("bare_blocking", "^-", "bare JAX loop, blocking every step"),
        ("synced", "s-", "learner, syncing in the background"),
    ):
        ax.plot(range(1, args.repeats + 1), rates[side], marker, label=label)
    ax.set_xlabel("repeat (interleaved)")
    ax.set_ylabel("inner steps / s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"learner overhead: {100 * (1 - ms / mb):.1f}% (medians)")
    ax.legend(fontsize=8)
    save_figure(fig, args.results_name, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
