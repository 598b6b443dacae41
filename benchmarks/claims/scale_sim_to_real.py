"""Sim-to-real: the scale simulator configured like a real local run, against that run's measurements.

    .venv/bin/python -m benchmarks.claims.scale_sim_to_real [--measured benchmarks/results/goodput.json] [--runs DIR]

The real runs are ``benchmarks/claims/goodput.py``'s: M = 4 learners, P = 4, H = 32,
emulated 50 ms steps, 1.5M tokens, the same seeded kills (each learner
restarted 3 s after its kill) for synchronous and Decoupled DiLoCo. The
simulator gets, from the measured file:

- the failure plan (kill times and the 3 s downtime); the real controller
  starts its schedule at the first merge, so the simulator shifts the kills
  by its own first merge time;
- the step time and the synchronous round's overhead, calibrated on the
  **fault-free** runs only (step: the decoupled run's wall time per step;
  round overhead: the sync run's round period minus H steps);
- the time from a learner's restart to its first step (process start, join,
  state fetch, JIT compile): measured from the kept runs with ``--runs``, else
  the value measured on 2026-11-30 (``REJOIN_S``).

Then it predicts the runs **with failures** and reports predicted against
measured merged goodput (the benchmarks' definition: merged tokens over M ×
wall × nominal rate), longest stall and wall time. Writes
``benchmarks/results/scale_sim_to_real.json`` and
``scale_sim_to_real_timeline.png`` (the predicted sync DiLoCo run).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, markdown_table, write_results
from chaos.scale import ScaleResult, build_scale_config, simulate_scale
from chaos.scale.plots import plot_timeline

# Restart to first inner step of the new incarnation, median over the 15 restarts in the kept goodput runs
# (2026-11-30; ``--runs`` measures it again): process start ~0.9 s, join, state fetch, JIT compile.
REJOIN_S = 1.97
MODES = {"sync DiLoCo": "sync-diloco", "decoupled (defaults)": "decoupled"}


def rejoin_from_runs(runs: Path) -> float:
    """Median seconds from each kill's heal (restart) to the restarted learner's first step event."""
    gaps = []
    for history in runs.glob("*failures*/history.jsonl"):
        events = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        heals = {e["fault_id"]: e for e in events if e.get("kind") == "fault" and e.get("action") == "heal"}
        for heal in heals.values():  # the last record of each fault's heal: the restart itself
            target = heal["targets"][0]
            steps = [
                e["ts"]
                for e in events
                if e.get("kind") == "step" and e.get("source") == target and e["ts"] > heal["ts"]
            ]
            if steps:
                gaps.append(min(steps) - heal["ts"])
    if not gaps:
        raise SystemExit(
            f"{runs}: no kept failure runs with restarts found (run benchmarks.claims.goodput --keep-runs)"
        )
    return statistics.median(gaps)


def _row(doc: dict[str, Any], label: str) -> dict[str, Any]:
    for run in doc["results"]["runs"]:
        if run["label"] == label:
            return run
    raise SystemExit(f"the measured file has no run labelled {label!r}")


def plan(
    cfg: dict[str, Any],
    mode: str,
    step_s: float,
    tokens_per_step: float,
    *,
    overhead_s: float = 0.0,
    rejoin_s: float = 0.0,
    kills: list[dict[str, Any]] | None = None,
    shift_s: float = 0.0,
) -> dict[str, Any]:
    m = cfg["learners"]
    # The real syncer's budget counts trained tokens (the learners' reports), so the simulated one does too.
    return {
        "name": f"{mode} like benchmarks.claims.goodput",
        "duration": 600,
        "token_budget": cfg["budget"],
        "budget_counts": "trained",
        "elastic": False,
        "cluster": {"chips": m},
        "workload": {"step_s": step_s, "tokens_per_step": tokens_per_step},
        "failures": {
            "mtbi_per_chip": 0,
            "schedule": [
                {"at": k["at"] + shift_s, "learner": int(k["targets"][0].split("-")[1]), "down_s": k["duration"]}
                for k in kills or []
            ],
        },
        "recovery": {"rejoin_s": rejoin_s},
        "network": {"round_overhead_s": overhead_s},
        "algorithm": {
            "mode": mode,
            "num_learners": m,
            "num_fragments": cfg["fragments"],
            "sync_every": cfg["sync_every"],
        },
    }


def calibrate(doc: dict[str, Any], rejoin_s: float) -> dict[str, float]:
    """Step time, tokens per step and the sync round's overhead, from the **fault-free** measured runs only."""
    cfg = doc["config"]
    m, h = cfg["learners"], cfg["sync_every"]
    g = _row(doc, "sync DiLoCo, fault-free")["goodput"]
    nominal_per_learner = (
        g["merged_tokens"] / (g["wall_s"] * g["merged"]) / m
    )  # tokens per learner-second at 50 ms
    tokens_per_learner_step = nominal_per_learner * cfg["step_s"]
    d = _row(doc, "decoupled (defaults), fault-free")["goodput"]
    step_s = d["wall_s"] / (d["trained_tokens"] / m / tokens_per_learner_step)
    rounds = g["merged_tokens"] / (m * h * tokens_per_learner_step)
    return {
        "nominal_tokens_per_learner_s": nominal_per_learner,
        "tokens_per_learner_step": tokens_per_learner_step,
        "step_s": step_s,
        "sync_round_overhead_s": max(0.0, g["wall_s"] / rounds - h * step_s),
        "rejoin_s": rejoin_s,
    }


@dataclass(frozen=True)
class Comparison:
    """One measured run and the simulator's prediction of it."""

    run: str
    measured: dict[str, float]
    simulated: ScaleResult
    merged_goodput: float  # the simulated run's goodput by the benchmarks' definition

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "measured": self.measured,
            "simulated": {**self.simulated.to_json(), "merged_goodput": self.merged_goodput},
        }


def predict(doc: dict[str, Any], cal: dict[str, float]) -> list[Comparison]:
    """Simulate every measured run (fault-free and with the same kills) of both modes."""
    cfg = doc["config"]
    m = cfg["learners"]
    out = []
    for label, mode in MODES.items():
        overhead_s = cal["sync_round_overhead_s"] if mode == "sync-diloco" else 0.0
        rejoin_s = cal["rejoin_s"]
        per_step = m * cal["tokens_per_learner_step"]
        free = simulate_scale(
            build_scale_config(
                plan(cfg, mode, cal["step_s"], per_step, overhead_s=overhead_s, rejoin_s=rejoin_s),
                f"{label}, fault-free",
            ),
            timeline=True,
        )
        # The real controller starts the failure schedule at the first merge: so does the simulated one.
        first_merge = min(free.timeline.updates) if free.timeline and free.timeline.updates else 0.0
        failed = simulate_scale(
            build_scale_config(
                plan(
                    cfg,
                    mode,
                    cal["step_s"],
                    per_step,
                    overhead_s=overhead_s,
                    rejoin_s=rejoin_s,
                    kills=cfg["failure_plan"],
                    shift_s=first_merge,
                ),
                f"{label}, failures",
            ),
            timeline=True,
        )
        for kind, sim in (("fault-free", free), ("failures", failed)):
            real = _row(doc, f"{label}, {kind}")
            measured = {
                "failures": real["failures"],
                "merged_goodput": real["goodput"]["merged"],
                "longest_stall_s": real["longest_stall_s"],
                "wall_s": real["wall_s"],
                "compute_goodput": real["goodput"]["compute"],
            }
            # The benchmarks' merged goodput: merged tokens / (M × wall × nominal rate at 50 ms steps).
            tg = sim.merged_tokens / (m * sim.wall_s * cal["nominal_tokens_per_learner_s"])
            out.append(Comparison(f"{label}, {kind}", measured, sim, tg))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measured", type=Path, default=RESULTS / "goodput.json")
    ap.add_argument(
        "--runs", type=Path, help="benchmarks.claims.goodput --keep-runs directory: measure the rejoin time"
    )
    args = ap.parse_args(argv)
    doc = json.loads(args.measured.read_text())
    cal = calibrate(doc, rejoin_from_runs(args.runs) if args.runs else REJOIN_S)
    comparisons = predict(doc, cal)
    rows = []
    for c in comparisons:
        mm, sim = c.measured, c.simulated
        rows.append(
            [
                c.run,
                mm["failures"],
                sim.failures,
                f"{mm['merged_goodput']:.3f}",
                f"{c.merged_goodput:.3f}",
                f"{c.merged_goodput - mm['merged_goodput']:+.3f}",
                f"{mm['longest_stall_s']:.2f}",
                f"{sim.longest_stall_s:.2f}",
                f"{mm['wall_s']:.1f}",
                f"{sim.wall_s:.1f}",
            ]
        )
    table = markdown_table(
        [
            "run",
            "failures (real)",
            "failures (sim)",
            "merged goodput (real)",
            "(sim)",
            "Δ",
            "longest stall s (real)",
            "(sim)",
            "wall s (real)",
            "(sim)",
        ],
        rows,
    )
    print(f"calibration (fault-free runs): {json.dumps({k: round(v, 4) for k, v in cal.items()})}")
    print(table)
    write_results(
        "scale_sim_to_real",
        config={
            "measured": str(args.measured),
            "calibration": cal,
            "rejoin_source": str(args.runs or "REJOIN_S (measured 2026-11-30)"),
        },
        results={"runs": [c.to_json() for c in comparisons]},
        table=table,
    )
    sync_failed = next(c.simulated for c in comparisons if c.run == "sync DiLoCo, failures")
    plot_timeline(sync_failed, RESULTS / "scale_sim_to_real_timeline.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
