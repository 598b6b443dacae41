"""Sim-to-real: the scale simulator configured like a real local run, against that run's measurements.

    .venv/bin/python -m benchmarks.scale_sim_to_real [--measured benchmarks/results/goodput.json] [--runs DIR]

The real runs are ``benchmarks/goodput.py``'s: M = 4 learners, P = 4, H = 32,
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
measured time goodput (the benchmarks' definition: merged tokens over M ×
wall × nominal rate), longest stall and wall time. Writes
``benchmarks/results/scale_sim_to_real.json`` and
``scale_sim_to_real_timeline.png`` (the predicted sync DiLoCo run).
"""

from __future__ import annotations

import argparse
import json
import statistics
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
            steps = [e["ts"] for e in events if e.get("kind") == "step" and e.get("source") == target
                     and e["ts"] > heal["ts"]]
            if steps:
                gaps.append(min(steps) - heal["ts"])
    if not gaps:
        raise SystemExit(f"{runs}: no kept failure runs with restarts found (run benchmarks.goodput --keep-runs)")
    return statistics.median(gaps)


def _row(doc: dict[str, Any], label: str) -> dict[str, Any]:
    for run in doc["results"]["runs"]:
        if run["label"] == label:
            return run
    raise SystemExit(f"the measured file has no run labelled {label!r}")


def plan(cfg: dict[str, Any], mode: str, step_s: float, tokens_per_step: float, *, overhead_s: float = 0.0,
         rejoin_s: float = 0.0, kills: list[dict[str, Any]] | None = None, shift_s: float = 0.0) -> dict[str, Any]:
    m = cfg["learners"]
    return {"name": f"{mode} like benchmarks.goodput", "duration": 600, "token_budget": cfg["budget"],
            "elastic": False, "cluster": {"chips": m},
            "workload": {"step_s": step_s, "tokens_per_step": tokens_per_step},
            "failures": {"mtbi_per_chip": 0, "schedule": [
                {"at": k["at"] + shift_s, "learner": int(k["targets"][0].split("-")[1]), "down_s": k["duration"]}
                for k in kills or []]},
            "recovery": {"rejoin_s": rejoin_s},
            "network": {"round_overhead_s": overhead_s},
            "algorithm": {"mode": mode, "num_learners": m, "num_fragments": cfg["fragments"],
                          "sync_every": cfg["sync_every"]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measured", type=Path, default=RESULTS / "goodput.json")
    ap.add_argument("--runs", type=Path, help="benchmarks.goodput --keep-runs directory: measure the rejoin time")
    args = ap.parse_args(argv)
    doc = json.loads(args.measured.read_text())
    cfg = doc["config"]
    m, h = cfg["learners"], cfg["sync_every"]
    rejoin = rejoin_from_runs(args.runs) if args.runs else REJOIN_S

    # Calibration, fault-free runs only.
    sync_free, dec_free = _row(doc, "sync DiLoCo, fault-free"), _row(doc, "decoupled (defaults), fault-free")
    g = sync_free["goodput"]
    nominal_per_learner = g["merged_tokens"] / (g["wall_s"] * g["time"]) / m  # tokens per learner-second at 50 ms
    tokens_per_learner_step = nominal_per_learner * cfg["step_s"]
    d = dec_free["goodput"]
    step_s = d["wall_s"] / (d["trained_tokens"] / m / tokens_per_learner_step)
    rounds = g["merged_tokens"] / (m * h * tokens_per_learner_step)
    overhead = max(0.0, g["wall_s"] / rounds - h * step_s)
    calibration = {"tokens_per_learner_step": tokens_per_learner_step, "step_s": step_s,
                   "sync_round_overhead_s": overhead, "rejoin_s": rejoin, "rejoin_source": str(args.runs or
                   "REJOIN_S (measured 2026-11-30)")}

    rows, results = [], []
    timeline_result: ScaleResult | None = None
    for label, mode in MODES.items():
        kw = dict(overhead_s=overhead if mode == "sync-diloco" else 0.0, rejoin_s=rejoin)
        free_plan = plan(cfg, mode, step_s, m * tokens_per_learner_step, **kw)
        free = simulate_scale(build_scale_config(free_plan, f"{label}, fault-free"), timeline=True)
        first_merge = min(free.timeline.updates) if free.timeline and free.timeline.updates else 0.0
        fail_plan = plan(cfg, mode, step_s, m * tokens_per_learner_step, kills=cfg["failure_plan"],
                         shift_s=first_merge, **kw)
        failed = simulate_scale(build_scale_config(fail_plan, f"{label}, failures"), timeline=True)
        if mode == "sync-diloco":
            timeline_result = failed
        for kind, sim in (("fault-free", free), ("failures", failed)):
            real = _row(doc, f"{label}, {kind}")
            # The benchmarks' time goodput: merged tokens / (M × wall × nominal rate at 50 ms steps).
            sim_time_goodput = sim.merged_tokens / (m * sim.wall_s * nominal_per_learner)
            meas = real["goodput"]["time"]
            rows.append([f"{label}, {kind}", real["failures"], sim.failures, f"{meas:.3f}", f"{sim_time_goodput:.3f}",
                         f"{sim_time_goodput - meas:+.3f}", f"{real['longest_stall_s']:.2f}",
                         f"{sim.longest_stall_s:.2f}", f"{real['wall_s']:.1f}", f"{sim.wall_s:.1f}"])
            results.append({"run": f"{label}, {kind}", "measured": {"failures": real["failures"],
                            "time_goodput": meas, "longest_stall_s": real["longest_stall_s"],
                            "wall_s": real["wall_s"], "compute_goodput": real["goodput"]["compute"]},
                            "simulated": {**sim.to_json(), "time_goodput": sim_time_goodput}})
    table = markdown_table(["run", "failures (real)", "failures (sim)", "time goodput (real)", "(sim)", "Δ",
                            "longest stall s (real)", "(sim)", "wall s (real)", "(sim)"], rows)
    print(f"calibration (fault-free runs): {json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in calibration.items()})}")
    print(table)
    write_results("scale_sim_to_real", config={"measured": str(args.measured), "calibration": calibration},
                  results={"runs": results}, table=table)
    if timeline_result is not None:
        plot_timeline(timeline_result, RESULTS / "scale_sim_to_real_timeline.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
