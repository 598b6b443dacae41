"""Search speed: `diloco-chaos search` with and without Hypothesis' explain phase, side by side.

Once an example fails, Hypothesis traces every later run (``sys.settrace`` on Python 3.11) and its explain phase
re-runs variations of the failing example, to say which parts of it mattered; ``find`` never prints that
explanation. ``chaos.search.SEARCH_PHASES`` leaves the phase out. This script runs the planted-bug search of
tests/property/test_search.py both ways, interleaved per seed (so machine noise hits both alike), checks that both
shrink to the same schedule, and prints the median times and their ratio.

    .venv/bin/python -m benchmarks.costs.search_phases [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from hypothesis import Phase

import chaos.search
from benchmarks.common import markdown_table, write_results
from chaos.scenario import scenario_with

# The planted-bug search's template (tests/property/test_search.py searches it too): the syncer forgets a learner
# that rejoins as a new incarnation, which the reintegration check catches.
CHECKS = {"reintegration": {"within_s": 10}, "liveness": {"max_gap_s": 10}}
BUGGY = scenario_with(
    "kill-and-rejoin",
    name="planted",
    schedule=[],
    checks=CHECKS,
    cluster={"token_budget": 1_200_000, "syncer": {"planted_bug": "forget_rejoined"}},
)
VARIANTS = {
    "without explain (SEARCH_PHASES)": chaos.search.SEARCH_PHASES,
    "every phase (with explain)": tuple(Phase),
}


def timed_search(phases: tuple[Phase, ...], seed: int) -> tuple[float, str, int]:
    """Seconds, the shrunk schedule and the schedules simulated, for one search with these phases."""
    kept = chaos.search.SEARCH_PHASES
    chaos.search.SEARCH_PHASES = phases  # read by find_failure at call time
    try:
        t0 = time.perf_counter()
        found = chaos.search.find_failure(BUGGY, max_examples=200, seed=seed)
        seconds = time.perf_counter() - t0
    finally:
        chaos.search.SEARCH_PHASES = kept
    if found is None:
        raise SystemExit(f"seed {seed}: the search missed the planted bug; the benchmark measures nothing")
    return seconds, found.schedule.describe(), found.examples_run


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="searches per variant, seeds 0..N-1 (default 3)")
    args = p.parse_args(argv)
    chaos.search.simulate(BUGGY)  # warm-up: imports, JIT, the memoised fault-free baseline
    runs: dict[str, list[tuple[float, str, int]]] = {name: [] for name in VARIANTS}
    for seed in range(args.seeds):
        for name, phases in VARIANTS.items():
            runs[name].append(timed_search(phases, seed))
            print(f"seed {seed} {name}: {runs[name][-1][0]:.1f} s, {runs[name][-1][1]}", flush=True)
    shrunk = {name: [r[1] for r in rs] for name, rs in runs.items()}
    if len({tuple(v) for v in shrunk.values()}) != 1:
        raise SystemExit(f"the variants shrank to different schedules: {shrunk}")
    med = {name: statistics.median(r[0] for r in rs) for name, rs in runs.items()}
    fast, slow = VARIANTS
    rows = [
        (
            name,
            f"{med[name]:.1f}",
            ", ".join(f"{r[0]:.1f}" for r in runs[name]),
            ", ".join(str(r[2]) for r in runs[name]),
        )
        for name in VARIANTS
    ]
    table = markdown_table(("phases", "median s", "per seed s", "schedules simulated"), rows)
    table += f"\n\nratio (every phase / without explain, medians): {med[slow] / med[fast]:.2f}x"
    print(table)
    write_results(
        "search_phases",
        config={"seeds": args.seeds, "scenario": "kill-and-rejoin, forget_rejoined"},
        results={name: {"median_s": med[name], "runs": runs[name]} for name in VARIANTS},
        table=table,
    )


if __name__ == "__main__":
    main()
