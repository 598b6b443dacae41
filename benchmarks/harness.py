"""Run one cluster for a benchmark: the chaos controller's real path, without a baseline or verdicts.

A benchmark run is a scenario like any other (real syncer and learner
processes, each learner behind its own real Toxiproxy proxy, faults from the
same injectors, teardown on every exit path), so a benchmark measures the
system the chaos suites test. Two things differ: no fault-free baseline is run
first (the benchmark runs its own, side by side), and a run may stop early on
a condition of the syncer's status (e.g. "eval loss reached the target").

Learners are *emulated accelerators*: ``learner.step_delay_s`` makes each
inner step last at least that long while JAX computes asynchronously inside
the sleep, so a learner's speed does not depend on how busy the other
learners keep this machine's 2 cores. Without it, a killed learner would
speed the survivors up and a blocked one would free CPU for the rest, and no
time-based figure would mean what it means on separate chips.

Example:
    h = run_cluster("dp", {"algorithm": {"mode": "data-parallel", "num_learners": 4}}, Path("/tmp/b"))
    print(len(h.of(ev.Merge)))
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from chaos.controller import RunOptions, run_scenario
from chaos.errors import RunError
from chaos.history import History
from chaos.scenario import Scenario, resolve
from trainer import presets
from trainer.presets import PRESETS

# Every benchmark run: a Step event per step (training start and rates are read from them). Liveness and
# reintegration are off (a benchmark judges by its own measures); safety and durability still run.
BENCH_LEARNER = {"step_event_every": 1}
QUIET_CHECKS = {"liveness": {"enabled": False}, "reintegration": {"enabled": False}}

# The decoupled trainer before rounds ran on the syncer's clock: a round per arrival group (about three outer
# steps per fragment per H inner steps), uploads merged as computed, outer momentum 0.5 to compensate, and τ = 2.
# Kept reachable by config as the negative control of the reference check (benchmarks/claims/reference_parity.py).
PRE_ROUNDS = {"rounds": "arrival", "outer_gradient": "base", "outer_momentum": 0.5, "overlap_steps": 2}
PRE_ROUNDS_LABEL = "before rounds, negative control"


def run_cluster(
    label: str,
    cluster: dict[str, Any],
    out_root: Path,
    *,
    schedule: list[dict[str, Any]] | None = None,
    stop_when: Callable[[Any], bool] | None = None,
    timeout_s: float = 1800.0,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    reuse: bool = False,
) -> History:
    """Run ``cluster`` (a RunConfig tree) with ``schedule`` (scenario fault specs) and return its history.

    The run directory is ``out_root/label``; a run that ends early by ``stop_when`` is complete for the
    benchmark's purposes (its final eval is the last one the syncer made). ``reuse``: when that directory
    holds a finished run already (``--reuse`` of a benchmark with ``--keep-runs``), read it instead of running,
    so a table can be recomputed from a run's artifacts.
    """
    cluster = {**cluster, "learner": {**BENCH_LEARNER, **cluster.get("learner", {})}}
    scenario = Scenario.model_validate(
        {
            "name": label,
            "seed": seed,
            "cluster": cluster,
            "schedule": schedule or [],
            "checks": QUIET_CHECKS,
            "timeout_s": timeout_s,
        }
    )
    out = out_root / label
    if reuse and (out / "report.json").exists():
        # A finished run is the same run whatever time limit it had: only the configuration must match.
        kept = Scenario.model_validate_json((out / "scenario.json").read_text()).model_copy(
            update={"timeout_s": timeout_s}
        )
        if kept != scenario:
            raise RunError(
                f"{out} holds a run of another configuration ({', '.join(differences(kept, scenario))} differ); "
                "give this run its own --keep-runs directory, or drop --reuse to run it afresh"
            )
        return History.read(out)
    t = time.monotonic()
    say = progress or (lambda msg: None)
    say(f"[{label}] starting")
    run_scenario(
        scenario,
        RunOptions(
            out_dir=out,
            baseline=False,
            stop_when=stop_when,
            progress=(lambda msg: say(f"[{label}] {msg}")) if progress else None,
        ),
    )
    say(f"[{label}] done in {time.monotonic() - t:.0f} s")
    return History.read(out)


def builtin_cluster(name: str, preset: str = "tiny") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A built-in scenario's cluster (``preset`` applied over it, as ``diloco-chaos run --preset`` does) and its
    schedule, as trees a benchmark edits and hands to :func:`run_cluster`.

    >>> cluster, schedule = builtin_cluster("corrupt-learner")
    >>> cluster["algorithm"]["num_learners"], [f["fault"] for f in schedule]
    (3, ['corrupt'])
    """
    tree = yaml.safe_load(resolve(name).read_text())
    return presets.apply(tree.get("cluster") or {}, preset), [dict(f) for f in tree.get("schedule") or []]


def differences(a: Scenario, b: Scenario) -> list[str]:
    """The dotted paths of the settings in which two scenarios differ (a kept run reused for another config).

    >>> x = Scenario.model_validate({"name": "x", "cluster": {"algorithm": {"grace": True}}})
    >>> differences(x, x.model_copy(update={"seed": 7, "cluster": x.cluster.model_copy(
    ...     update={"algorithm": x.cluster.algorithm.model_copy(update={"grace": False})})}))
    ['cluster.algorithm.grace', 'seed']
    """

    def leaves(tree: Any, prefix: str) -> dict[str, Any]:
        if isinstance(tree, dict):
            return {k: v for key, sub in tree.items() for k, v in leaves(sub, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): tree}

    left, right = leaves(a.model_dump(mode="json"), ""), leaves(b.model_dump(mode="json"), "")
    return sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))


WHOLE_RUN = 10**6  # seconds: a fault that lasts the whole run


def link_faults(*, rate_kbps: int | None = None, latency_ms: int = 0, jitter_ms: int = 0) -> list[dict[str, Any]]:
    """Scenario fault specs that make every learner's link slower for the whole run (empty: links as they are).

    >>> [f["fault"] for f in link_faults(rate_kbps=200, latency_ms=25)], link_faults()
    (['bandwidth', 'latency'], [])
    """
    faults: list[dict[str, Any]] = []
    if rate_kbps:
        faults.append(
            {
                "fault": "bandwidth",
                "id": "bw",
                "targets": "all",
                "rate_kbps": rate_kbps,
                "at": 0,
                "duration": WHOLE_RUN,
            }
        )
    if latency_ms:
        faults.append(
            {
                "fault": "latency",
                "id": "lat",
                "targets": "all",
                "latency_ms": latency_ms,
                "jitter_ms": jitter_ms,
                "at": 0,
                "duration": WHOLE_RUN,
            }
        )
    return faults


def add_run_arguments(
    ap: argparse.ArgumentParser,
    *,
    learners: int = 4,
    fragments: int = 4,
    sync_every: int = 32,
    step_s: float = 0.05,
) -> None:
    """The arguments every cluster benchmark shares: cluster shape, emulated step, seed and where runs go."""
    ap.add_argument(
        "--size", default="tiny", choices=["tiny", "small", "wide"], help="model size (small: hours on 2 cores)"
    )
    ap.add_argument("--learners", type=int, default=learners)
    ap.add_argument("--fragments", type=int, default=fragments)
    ap.add_argument("--sync-every", type=int, default=sync_every, help="H")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3, help="inner AdamW learning rate")
    ap.add_argument("--step-s", type=float, default=step_s, help="emulated step time of a (fast) learner")
    ap.add_argument("--seed", type=int, default=0, help="seeds every run (and any failure plan)")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--keep-runs", type=Path, default=None, help="keep every run directory here")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep-runs: read runs already there instead of "
        "running them again (recompute the table from artifacts)",
    )


def add_data_arguments(ap: argparse.ArgumentParser, *, vocab: int | None = None) -> None:
    """The data source's flags, for a benchmark whose runs take their data section from :func:`data_of`."""
    ap.add_argument(
        "--text",
        action="store_true",
        help="train on the real-text corpus (data.source: text, byte-level, the whole held-out split as the eval "
        "set; trainer.presets' small and wide) instead of the Markov source: --data-order, --older-classes and "
        "--vocab are then unused",
    )
    ap.add_argument("--data-order", type=int, default=1, choices=[1, 2], help="Markov order of the data source")
    ap.add_argument(
        "--older-classes",
        type=int,
        default=None,
        help="order 2: the older token counts only mod this (trainer.data; 2 = one bit)",
    )
    ap.add_argument(
        "--vocab",
        type=int,
        default=vocab,
        help="tokens of the synthetic language (data.vocab_size; the model's embedding and output "
        "layer follow; default %(default)s; the tiny model's own vocabulary is 64)",
    )


def data_of(args: argparse.Namespace) -> dict[str, Any]:
    """The run config's data section from :func:`add_data_arguments`' flags."""
    if args.text:
        return dict(PRESETS["small"].cluster["data"])
    return {"order": args.data_order, "older_classes": args.older_classes, "vocab_size": args.vocab}


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed arguments as JSON-able configuration for the results file."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


def quiet_progress(msg: str) -> None:
    """Print a run's phases, not the controller's status line every few seconds."""
    if "] [chaos] +" not in msg:
        print(msg, flush=True)


def plot_loss_and_goodput(rows: list[dict[str, Any]], name: str, out_dir: Path, *, x: str = "time") -> Path:
    """``<name>.png``: eval loss per run (``curve``) over time or tokens, and goodput bars (``goodput``)."""
    from benchmarks.common import new_figure, save_figure

    fig, (ax, bx) = new_figure(12, 4.5, ncols=2)
    for r in rows:
        if r["curve"]:
            ts, toks, ls = zip(*r["curve"])
            ax.plot(ts if x == "time" else toks, ls, ":" if "fault-free" in r["label"] else "-", label=r["label"])
    ax.set_xlabel("seconds since the first inner step" if x == "time" else "tokens trained (all learners)")
    ax.set_ylabel("eval loss")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    _goodput_bars(bx, rows)
    return save_figure(fig, name, out_dir)


def _goodput_bars(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Horizontal bars of merged goodput with compute goodput outlined, one per row (``label``, ``goodput``)."""
    labels = [r["label"] for r in rows]
    ax.barh(labels, [r["goodput"]["merged"] for r in rows], color="tab:blue", label="merged goodput")
    ax.barh(
        labels, [r["goodput"]["compute"] for r in rows], color="none", edgecolor="black", label="compute goodput"
    )
    ax.set_xlim(0, 1)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
