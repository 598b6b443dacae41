"""Verdicts under load: every built-in scenario, every negative control and the main job, repeatedly, while
busy processes hold every core (benchmarks.load.CpuLoad, seeded per run).

A verdict that flips with the machine's load is noise. The bar (issue 15): 0 INDETERMINATE and 0 FAIL for the
built-ins, every negative control FAIL (its own checker) every time, the main job from a fresh clone 3 of 3.

    .venv/bin/python -m benchmarks.costs.under_load [--repeats 3] [--only kill-and-rejoin ...] [--controls] [--main-job]

Each run gets its own load seed (run i of a scenario: seed i); baselines are cached by config as in any chaos run
(the first run of a config computes its baseline under the same load). Prints a table, writes
``benchmarks/results/under_load.json``; every run directory is kept under ``--keep-runs`` (default a temp dir).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, write_results
from benchmarks.load import CpuLoad
from chaos.exit_codes import ExitCode


@dataclass
class Outcome:
    """One run: its overall status (pass / fail / indeterminate / error) and the checks that did not pass."""

    status: str
    seconds: float
    not_passed: list[str] = field(default_factory=list)


def tally(outcomes: list[Outcome], expect: str = "pass") -> dict[str, object]:
    """Counts per status and whether every run ended as expected.

    >>> tally([Outcome("pass", 1.0), Outcome("indeterminate", 2.0, ["reintegration: indeterminate"])])
    {'runs': 2, 'pass': 1, 'fail': 0, 'indeterminate': 1, 'error': 0, 'as_expected': False, 'not_passed': ['reintegration: indeterminate']}
    """
    c = Counter(o.status for o in outcomes)
    return {
        "runs": len(outcomes),
        **{s: c.get(s, 0) for s in ("pass", "fail", "indeterminate", "error")},
        "as_expected": all(o.status == expect for o in outcomes),
        "not_passed": sorted({n for o in outcomes for n in o.not_passed}),
    }


def _chaos_run(scenario, out: Path, baseline: bool, cache: Path) -> Outcome:
    from chaos.controller import RunOptions, run_scenario
    from chaos.errors import ChaosError

    t = time.monotonic()
    try:
        r = run_scenario(scenario, RunOptions(out, baseline=baseline, baseline_cache=cache, progress=None))
    except ChaosError as err:
        return Outcome("error", time.monotonic() - t, [str(err)[:200]])
    return Outcome(
        r.status, time.monotonic() - t, [f"{v.name}: {v.status}" for v in r.verdicts if v.status != "pass"]
    )


def _main_job(seed: int, root: Path) -> Outcome:
    """``scripts/main`` from a fresh clone of this checkout's HEAD (containers: needs Docker, as the README says)."""
    clone = root / f"main-job-{seed}"
    subprocess.run(["git", "clone", "-q", ".", str(clone)], check=True)
    t = time.monotonic()
    with CpuLoad(seed=seed):
        code = subprocess.run(
            ["scripts/main"], cwd=clone, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
    status = ExitCode(code).name.lower() if code in set(ExitCode) else "error"
    return Outcome(status, time.monotonic() - t, [] if code == 0 else [f"exit code {code}"])


def main(argv: list[str] | None = None) -> int:
    from chaos.negative_controls import CONTROLS
    from chaos.scenario import builtin_scenarios, load_scenario

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="+", help="these built-ins (default: all)")
    ap.add_argument("--controls", action="store_true", help="run the negative controls too")
    ap.add_argument("--main-job", action="store_true", help="run scripts/main from a fresh clone too (Docker)")
    ap.add_argument("--keep-runs", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    names = args.only or sorted(builtin_scenarios())
    rows: list[list[object]] = []
    results: dict[str, dict[str, Any]] = {}  # per scenario or control: its tally and outcomes (the JSON record)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        cache = root / "baselines"
        for name in names:
            outs = []
            for i in range(args.repeats):
                with CpuLoad(seed=i):
                    outs.append(
                        _chaos_run(load_scenario(builtin_scenarios()[name]), root / f"{name}-{i}", True, cache)
                    )
                print(f"  {name} run {i}: {asdict(outs[-1])}", flush=True)
            results[name] = {"expect": "pass", **tally(outs), "outcomes": [asdict(o) for o in outs]}
        for c in CONTROLS if args.controls else ():
            outs = []
            for i in range(args.repeats):
                with CpuLoad(seed=i):
                    o = _chaos_run(
                        c.scenario(), root / f"control-{c.name.replace('/', '_')}-{i}", c.baseline, cache
                    )
                # The control is caught when its own checker fails (the run as a whole then fails).
                o.status = (
                    "fail"
                    if f"{c.must_fail}: fail" in o.not_passed
                    else (o.status if o.status != "fail" else "fail (other check)")
                )
                outs.append(o)
                print(f"  control {c.name} run {i}: {asdict(o)}", flush=True)
            results[f"control: {c.name}"] = {
                "expect": f"fail ({c.must_fail})",
                **tally(outs, "fail"),
                "outcomes": [asdict(o) for o in outs],
            }
        if args.main_job:
            outs = [_main_job(i, root) for i in range(args.repeats)]
            results["main job (fresh clone, containers)"] = {
                "expect": "pass",
                **tally(outs),
                "outcomes": [asdict(o) for o in outs],
            }
    for name, r in results.items():
        secs = sorted(o["seconds"] for o in r["outcomes"])
        rows.append(
            [
                name,
                r["expect"],
                r["runs"],
                r["pass"],
                r["fail"],
                r["indeterminate"],
                r["error"],
                "yes" if r["as_expected"] else "**no**",
                f"{secs[len(secs) // 2]:.0f}",
                "; ".join(r["not_passed"]) or "—",
            ]
        )
    table = markdown_table(
        [
            "run",
            "expected",
            "runs",
            "pass",
            "fail",
            "indeterminate",
            "error",
            "as expected",
            "median s",
            "checks not passed",
        ],
        rows,
    )
    print(f"\nunder benchmarks.load.CpuLoad (one hog per core), {args.repeats} runs each\n\n{table}")
    path = write_results("under_load", config=vars(args), results=results, table=table, out_dir=args.out_dir)
    print(f"\nresults: {path}")
    return 0 if all(r["as_expected"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
