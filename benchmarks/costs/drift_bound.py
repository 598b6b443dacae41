"""What invariant ``drift``'s bound must let honest learners through: their summed pull from the rounds' medians.

In deterministic mode the bound is not enforced (``syncer.drift_k: 0``): this only reads what the syncer records.
Every merge with at least three participants adds each participant's pull (its deviation from the coordinate-wise
median per step, in units of the inner lr, scaled by its share of the merge) to a leaky sum over about ``W`` of the
fragment's merges (:mod:`trainer.core.drift`); the drift is that sum's largest coordinate, recorded per
participant in each ``merge`` event. This runs built-in scenarios (their own schedules, each of ``--budget-times`` ×
their token budget, seeds given) and reports, over the seeds, the largest ``drift / √W`` any learner reached (all
honest): the ``k`` of a bound ``drift ≤ k·√W`` must stay above it. A steady push of ``a`` lr per step reaches
``a·√W`` on that scale.

    .venv/bin/python -m benchmarks.costs.drift_bound --seeds 0 1 2 3 4   # writes benchmarks/results/drift_bound.json

With ``--real``, the same on the real system: each built-in named is run (``benchmarks.harness.run_cluster``: the
local backend, real JAX learners, no baseline) at ``--preset``, and the syncer's own record of each participant's
drift after each merge (``merge`` events) is read, with the uploads it refused for drift (``syncer.drift_k`` set to
:data:`~trainer.core.drift.DRIFT_K`, enforced; as it was by default when the committed results were measured):

    .venv/bin/python -m benchmarks.costs.drift_bound --real straggler random-mix throttle-all --seeds 300 301 302 303 304
    # writes benchmarks/results/drift_bound_real.json
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, markdown_table, write_results
from trainer.core import drift


def largest_k(name: str, budget_times: float, windows: list[float], seed: int) -> dict[str, Any]:
    """Per window: the largest ``drift / √W`` of any learner over one deterministic-mode run (the syncer's own record:
    each participant's drift after each merge, ``merge`` events); and how many merges had enough participants to be
    measured."""
    from chaos.scenario import scenario_with
    from chaos.sim import SimOptions, simulate
    from trainer import events as ev

    base = scenario_with(name)
    budget = int(base.cluster.token_budget * budget_times)
    largest: dict[str, float] = {}
    for w in windows:
        scenario = scenario_with(
            name, seed=seed, cluster={"token_budget": budget, "syncer": {"drift_k": 0.0, "drift_window": w}}
        )
        merges = [
            e for e in simulate(scenario, SimOptions(baseline=False)).history.events if isinstance(e, ev.Merge)
        ]
        largest[str(w)] = max((p.drift / math.sqrt(w) for m in merges for p in m.participants), default=0.0)
    measured = sum(1 for m in merges if len(m.participants) >= drift.MIN_PARTICIPANTS)
    return {"largest_k": largest, "merges": len(merges), "measured": measured}


def real_run(name: str, preset: str, seed: int, out_root: Path) -> dict[str, Any]:
    """One real run of a built-in: each learner's largest ``drift / √W`` (the syncer's W), merges measured, and the
    uploads refused for drift."""
    from benchmarks.harness import builtin_cluster, quiet_progress, run_cluster
    from trainer import events as ev

    cluster, schedule = builtin_cluster(name, preset)
    # Enforced: an honest refusal shows.
    cluster["syncer"] = {**cluster.get("syncer", {}), "drift_k": drift.DRIFT_K}
    h = run_cluster(
        f"{preset}-{name}-{seed}", cluster, out_root, schedule=schedule, seed=seed, progress=quiet_progress
    )
    events = [e for e in h.events if e.source == "syncer"]
    merges = [e for e in events if isinstance(e, ev.Merge)]
    largest: dict[str, float] = {}
    for m in merges:
        for p in m.participants:
            largest[p.learner_id] = max(largest.get(p.learner_id, 0.0), p.drift / math.sqrt(drift.DRIFT_WINDOW))
    refused = sum(e.refusals for e in events if isinstance(e, ev.Reject) and e.reason == "drift")
    return {
        "largest_k": dict(sorted(largest.items())),
        "merges": len(merges),
        "measured": sum(1 for m in merges if len(m.participants) >= drift.MIN_PARTICIPANTS),
        "refused_for_drift": refused,
    }


def main_real(names: list[str], presets: list[str], seeds: list[int]) -> int:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    rows = []
    for preset in presets:
        results[preset] = {}
        for name in names:
            with tempfile.TemporaryDirectory(prefix="drift-bound-") as tmp:
                results[preset][name] = {str(s): real_run(name, preset, s, Path(tmp)) for s in seeds}
            for s, r in results[preset][name].items():
                print(preset, name, s, r, flush=True)
                k = " / ".join(fmt(v, 2) for v in r["largest_k"].values())
                rows.append([preset, name, s, k, f"{r['measured']} of {r['merges']}", r["refused_for_drift"]])
    table = markdown_table(
        [
            "preset",
            "built-in (real learners)",
            "seed",
            f"largest drift / √W per learner (W = {fmt(drift.DRIFT_WINDOW)}; refused above {fmt(drift.DRIFT_K)})",
            "merges measured (≥ 3 participants)",
            "uploads refused for drift",
        ],
        rows,
    )
    print(table)
    config = {"presets": presets, "seeds": seeds, "window": drift.DRIFT_WINDOW, "k": drift.DRIFT_K}
    path = write_results("drift_bound_real", config=config, results=results, table=table)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from chaos.scenario import builtin_scenarios

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget-times", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--windows", type=float, nargs="+", default=[drift.DRIFT_WINDOW])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--scenarios", nargs="*", help="built-ins (default: all)")
    ap.add_argument("--real", nargs="+", metavar="BUILT_IN", help="run these on the real system instead")
    ap.add_argument("--preset", nargs="+", default=["tiny"], help="with --real: the system under test's sizes")
    args = ap.parse_args(argv)
    if args.real:
        return main_real(args.real, args.preset, args.seeds)
    names = args.scenarios or sorted(builtin_scenarios())
    results: dict[str, dict[str, Any]] = {}
    rows = []
    for name in names:
        results[name] = {}
        cells = []
        for times in args.budget_times:
            runs = {str(seed): largest_k(name, times, args.windows, seed) for seed in args.seeds}
            results[name][str(times)] = runs
            print(name, times, runs, flush=True)
            cells += [fmt(max(r["largest_k"][str(w)] for r in runs.values()), 2) for w in args.windows]
            measured = sum(r["measured"] for r in runs.values())
            cells.append(f"{measured} of {sum(r['merges'] for r in runs.values())}")
        rows.append([name, *cells])
    header = ["built-in (deterministic mode)"]
    for times in args.budget_times:
        header += [f"largest drift / √W, W = {fmt(w)}, {fmt(times)}× the budget" for w in args.windows]
        header.append(f"merges measured (≥ 3 participants), {fmt(times)}×")
    table = markdown_table(header, rows)
    print(table)
    path = write_results(
        "drift_bound",
        config={"budget_times": args.budget_times, "windows": args.windows, "seeds": args.seeds},
        results=results,
        table=table,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
