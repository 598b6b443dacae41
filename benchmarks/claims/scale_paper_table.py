"""The paper's goodput table, reproduced by the scale simulator, cell by cell.

    .venv/bin/python -m benchmarks.claims.scale_paper_table [--seeds 1] [--duration 7d]

Every cell is one simulated week (by default) of its configuration at its chip
count, with one interruption per chip-year and the calibrated recovery times of
:mod:`chaos.scale.paper` (non-elastic 10 s + 61 s per failure, elastic 10 s +
11 s, plus the step in flight). With ``--seeds N`` a cell is the median of N
seeds. Prints the table (simulated, paper, difference), the largest
difference, and how long each cell took to simulate; writes
``benchmarks/results/scale_paper_table.json`` and ``scale_paper_table.png``
(goodput against chips, the paper's figure).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import TypedDict

from benchmarks.common import RESULTS, markdown_table, write_results
from chaos.scale import simulate_scale
from chaos.scale.paper import CHIPS, PAPER_GOODPUT, ROW_LABELS, paper_plan
from chaos.scale.plots import plot_goodput_sweep
from chaos.scale.quantities import format_count


class Cell(TypedDict):
    """One cell of the table, as the results file records it."""

    row: str
    chips: float
    paper: int
    simulated: float
    diff: float
    seeds: list[float]
    sim_seconds: list[float]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1, help="seeds per cell (the cell is their median)")
    ap.add_argument("--duration", default="7d", help="simulated time per cell")
    args = ap.parse_args(argv)
    workers = len(os.sched_getaffinity(0))  # Decoupled DiLoCo's fragments at once, as the CLI does
    sim: dict[str, list[float]] = {}
    cells: list[Cell] = []
    for row, paper_row in PAPER_GOODPUT.items():
        sim[row] = []
        for chips, paper in zip(CHIPS, paper_row):
            values: list[float] = []
            seconds: list[float] = []
            for seed in range(args.seeds):
                t0 = time.perf_counter()
                r = simulate_scale(paper_plan(row, chips, seed=seed, duration=args.duration), workers=workers)
                seconds.append(time.perf_counter() - t0)
                values.append(100 * r.goodput)
            g = statistics.median(values)
            sim[row].append(g)
            cells.append(
                {
                    "row": row,
                    "chips": chips,
                    "paper": paper,
                    "simulated": round(g, 2),
                    "diff": round(g - paper, 2),
                    "seeds": values,
                    "sim_seconds": seconds,
                }
            )
            print(
                f"{ROW_LABELS[row]:30s} {format_count(chips):>5s}: simulated {g:5.1f}% paper {paper}% "
                f"(Δ {g - paper:+.1f}) in {statistics.median(seconds):.1f} s",
                flush=True,
            )
    header = ["configuration", *[f"{format_count(c)} chips" for c in CHIPS]]
    rows = [
        [ROW_LABELS[row], *[f"{s:.1f} ({p}, {s - p:+.1f})" for s, p in zip(sim[row], PAPER_GOODPUT[row])]]
        for row in PAPER_GOODPUT
    ]
    table = "Cells: simulated goodput % (paper %, difference in points)\n\n" + markdown_table(header, rows)
    worst = max(cells, key=lambda c: abs(c["diff"]))
    slowest = max(max(c["sim_seconds"]) for c in cells)
    print()
    print(table)
    print(
        f"\nlargest difference: {worst['diff']:+} points ({ROW_LABELS[worst['row']]}, "
        f"{format_count(worst['chips'])} chips); slowest cell took {slowest:.1f} s to simulate"
    )
    write_results(
        "scale_paper_table",
        config={
            "seeds": args.seeds,
            "duration": args.duration,
            "plan_example": paper_plan("decoupled-8", 1.2e6).model_dump(mode="json"),
        },
        results={"cells": cells, "largest_diff": worst, "slowest_cell_s": slowest},
        table=table,
    )
    plot_goodput_sweep(
        sim,
        [format_count(c) for c in CHIPS],
        RESULTS / "scale_paper_table.png",
        xlabel="chips (one interruption per chip-year)",
        paper={k: list(v) for k, v in PAPER_GOODPUT.items()},
        labels=ROW_LABELS,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
