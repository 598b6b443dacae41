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

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.controller import RunOptions, run_scenario
from chaos.history import History
from chaos.scenario import Scenario

# Every benchmark run: a Step event per step (training start and rates are read from them), no checks to speak of.
BENCH_LEARNER = {"step_event_every": 1}
QUIET_CHECKS = {"liveness": {"enabled": False}, "reintegration": {"enabled": False}}


def run_cluster(label: str, cluster: dict[str, Any], out_root: Path, *, schedule: list[dict[str, Any]] | None = None,
                stop_when: Callable[[Any], bool] | None = None, timeout_s: float = 1800.0,
                seed: int = 0, progress: Callable[[str], None] | None = None) -> History:
    """Run ``cluster`` (a RunConfig tree) with ``schedule`` (scenario fault specs) and return its history.

    The run directory is ``out_root/label``; a run that ends early by ``stop_when`` is complete for the
    benchmark's purposes (its final eval is the last one the syncer made).
    """
    cluster = {**cluster, "learner": {**BENCH_LEARNER, **cluster.get("learner", {})}}
    scenario = Scenario.model_validate({"name": label, "seed": seed, "cluster": cluster, "schedule": schedule or [],
                                        "checks": QUIET_CHECKS, "timeout_s": timeout_s})
    out = out_root / label
    t = time.monotonic()
    say = progress or (lambda msg: None)
    say(f"[{label}] starting")
    run_scenario(scenario, RunOptions(out_dir=out, baseline=False, stop_when=stop_when,
                                      progress=(lambda msg: say(f"[{label}] {msg}")) if progress else None))
    say(f"[{label}] done in {time.monotonic() - t:.0f} s")
    return History.read(out)
