"""The scale simulator's speed: this tree against a baseline commit, the same commands side by side.

    .venv/bin/python -m benchmarks.costs.scale_speed [--baseline 699c15e] [--repeats 3] [--only week]

Each case is one ``diloco-chaos simulate --scale`` command (``CASES``): the issue's headline (2.4M chips, one
simulated week, ``--compare``: both data-parallel rows, sync DiLoCo and Decoupled DiLoCo, M = 8), four weeks, and
M = 32. The baseline is ``git archive``'d into a temporary directory and run from there; the two run in turn
(baseline, this tree, baseline, ...), each a fresh process, so the machine's noise hits both alike. Per run: wall
seconds and the CPU seconds the process used (less sensitive to other work on the machine than wall time). The
results (``--json``: every figure and counter at full precision) must be identical, since the simulator is
deterministic and a speed-up must not move them: a case whose outputs differ fails the benchmark. Prints a
table, writes ``benchmarks/results/<results-name>.json``.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, write_results

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "699c15e"  # the last commit before the scale engine's hot loop was rewritten (issue 42)


@dataclass(frozen=True)
class Case:
    name: str
    label: str
    args: tuple[str, ...]
    goal_s: float  # the goal for its wall time on this machine


CASES = (
    Case("week", "2.4M chips, 1 week, --compare (4 modes, M = 8)", ("--chips", "2.4M", "--compare"), 5.0),
    Case("four-weeks", "2.4M chips, 4 weeks, decoupled M = 8", ("--chips", "2.4M", "--duration", "28d"), 30.0),
    Case(
        "m32",
        "2.4M chips, 1 week, decoupled M = 32",
        ("--chips", "2.4M", "--set", "algorithm.num_learners=32"),
        30.0,
    ),
)


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float
    output: str


def run_once(tree: Path, case: Case) -> Timing:
    """One simulation in a fresh process whose imports come from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "simulate", "--scale", "--quiet", "--json", *case.args],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{case.name} in {tree} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu, done.stdout)


def export(commit: str, into: Path) -> None:
    """The tracked files of ``commit`` under ``into`` (nothing of the repository's state changes)."""
    blob = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", default=BASELINE, help="commit to compare with (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=[c.name for c in CASES], help="run only these cases")
    ap.add_argument("--results-name", default="scale_speed")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c.name in args.only]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        export(args.baseline, base)
        for case in cases:
            runs: dict[str, list[Timing]] = {"baseline": [], "now": []}
            for k in range(args.repeats):
                for arm, tree in (("baseline", base), ("now", ROOT)):
                    runs[arm].append(run_once(tree, case))
                    t = runs[arm][-1]
                    print(f"  {case.name} {arm} #{k + 1}: wall {t.wall_s:.2f} s, cpu {t.cpu_s:.2f} s", flush=True)
            outputs = {t.output for arm in runs.values() for t in arm}
            if len(outputs) != 1:
                print(f"{case.name}: the baseline and this tree print different results", file=sys.stderr)
                return 1
            med = {
                arm: {f: statistics.median(getattr(t, f) for t in ts) for f in ("wall_s", "cpu_s")}
                for arm, ts in runs.items()
            }
            results[case.name] = {
                "case": asdict(case),
                "runs": {arm: [{"wall_s": t.wall_s, "cpu_s": t.cpu_s} for t in ts] for arm, ts in runs.items()},
                "median": med,
                "same_output": True,
            }
    rows = [
        [
            r["case"]["label"],
            r["median"]["baseline"]["wall_s"],
            r["median"]["now"]["wall_s"],
            r["median"]["baseline"]["wall_s"] / r["median"]["now"]["wall_s"],
            r["median"]["baseline"]["cpu_s"] / r["median"]["now"]["cpu_s"],
            r["case"]["goal_s"],
            "yes" if r["median"]["now"]["wall_s"] <= r["case"]["goal_s"] else "no",
        ]
        for r in results.values()
    ]
    table = markdown_table(
        [
            "case",
            f"before ({args.baseline}), wall s",
            "now, wall s",
            "speed-up (wall)",
            "speed-up (CPU)",
            "goal, wall s",
            "goal met",
        ],
        rows,
    )
    print(f"\nmedians of {args.repeats} interleaved runs each; results identical in every run\n\n{table}")
    config = {"baseline": args.baseline, "repeats": args.repeats, "cases": [c.name for c in cases]}
    path = write_results(args.results_name, config=config, results=results, table=table, out_dir=args.out_dir)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
