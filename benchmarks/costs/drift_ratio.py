"""How far honest learners drift from the merges, summed over rounds: the measurement behind invariant ``drift``'s
design (docs/security.md). No defence is involved: this only watches.

Each accepted upload is judged per step against its fragment's last merged update per step, ``d = c / c_steps −
m / m_steps``; per learner and fragment ``S = Σ d`` and ``Q = Σ ‖d‖²``. Noise that changes from round to round
keeps ``‖S‖² / Q`` near 1; a steady push in one direction makes it grow like the number of uploads. A drift bound
of the form ``‖S‖ ≤ k·√Q`` refuses a learner once the ratio passes ``k²``. This runs every built-in scenario in
deterministic mode (their own schedules, fault-free learners otherwise, ``--budget-times`` × their token budget)
and reports each run's largest ratio per learner: the false alarms such a bound would raise on honest learners.

    .venv/bin/python -m benchmarks.costs.drift_ratio --budget-times 1 4   # writes benchmarks/results/drift_ratio.json
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks.common import fmt, markdown_table, write_results


def largest_ratios(name: str, budget_times: float) -> dict[str, float]:
    """Each learner's largest ``‖S‖² / Q`` over its uploads in one deterministic-mode run of a built-in."""
    from chaos.fault_plan import plan
    from chaos.scenario import scenario_with
    from chaos.sim.options import SimOptions
    from chaos.sim.runner import Simulation
    from trainer.core.syncer_state import SyncerState

    base = scenario_with(name)
    scenario = scenario_with(name, cluster={"token_budget": int(base.cluster.token_budget * budget_times)})
    merged: dict[int, tuple[dict[str, np.ndarray], float]] = {}
    sums: dict[tuple[str, int], tuple[dict[str, np.ndarray], float]] = {}
    largest: dict[str, float] = {}
    submit, merge = SyncerState.submit, SyncerState.merge

    def watched_submit(self: SyncerState, c: Any, now: float) -> Any:
        res = submit(self, c, now)  # raises when refused: only accepted uploads count
        if c.fragment in merged and not res.duplicate:
            m, steps = merged[c.fragment]
            d = {n: np.asarray(t, np.float64) / max(c.c_steps, 1) - m[n] / steps for n, t in c.tensors.items()}
            total, energy = sums.get((c.learner_id, c.fragment), ({}, 0.0))
            total = {n: total.get(n, 0.0) + v for n, v in d.items()}
            energy += sum(float(np.vdot(v, v)) for v in d.values())
            sums[(c.learner_id, c.fragment)] = (total, energy)
            ratio = sum(float(np.vdot(t, t)) for t in total.values()) / energy if energy > 0 else 0.0
            largest[c.learner_id] = max(largest.get(c.learner_id, 0.0), ratio)
        return res

    def watched_merge(self: SyncerState, fragment: int, now: float) -> Any:
        steps = [c.c_steps for c in self.rounds[fragment].contributions.values()]
        rec = merge(self, fragment, now)
        assert rec.audit is not None  # the core audits every merge it makes
        delta = {n: np.asarray(t, np.float64) for n, t in rec.audit.delta.items()}
        merged[fragment] = (delta, sum(steps) / len(steps))
        return rec

    SyncerState.submit, SyncerState.merge = watched_submit, watched_merge  # type: ignore[method-assign]
    try:
        Simulation(scenario, SimOptions(baseline=False), plan(scenario)).run()
    finally:
        SyncerState.submit, SyncerState.merge = submit, merge  # type: ignore[method-assign]
    return largest


def main(argv: list[str] | None = None) -> int:
    from chaos.scenario import builtin_scenarios

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget-times", type=float, nargs="+", default=[1.0, 4.0])
    args = ap.parse_args(argv)
    results: dict[str, dict[str, dict[str, float]]] = {}
    rows = []
    for name in sorted(builtin_scenarios()):
        results[name] = {}
        cells = []
        for times in args.budget_times:
            r = largest_ratios(name, times)
            results[name][str(times)] = r
            cells.append(" / ".join(f"{fmt(v, 2)}" for _, v in sorted(r.items())))
        rows.append([name, *cells])
        print(name, cells, flush=True)
    header = ["built-in (deterministic mode)"] + [
        f"largest ‖S‖²/Q, learner-0 / 1 / 2, at {fmt(t)}× the budget" for t in args.budget_times
    ]
    table = markdown_table(header, rows)
    print(table)
    path = write_results("drift_ratio", config={"budget_times": args.budget_times}, results=results, table=table)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
