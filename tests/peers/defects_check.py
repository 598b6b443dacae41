"""The torchft tier's proof that the checks work on a foreign system: each planted defect
(tests/peers/torchft_defects.py) is caught by a check, and the same run unmodified passes.

    .venv-torchft/bin/python -m tests.peers.defects_check [--out DIR]

Exit status 1 otherwise. (Needs torch: scripts/torchft-test runs it.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.common import markdown_table, write_results
from peers.torchft.run import ROOT, run

# defect -> the scenario that reaches it (a group must heal to skip healing) and the group it is planted in
PLANTED = {"skips_healing": ("kill-and-rejoin", "learner-1"), "commits_ignored": ("kill-and-rejoin", "learner-1")}


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m tests.peers.defects_check", description=__doc__.splitlines()[0])
    a.add_argument("--out", type=Path, default=ROOT / "runs" / "torchft" / "defects")
    a.add_argument("--inner-steps", type=int, default=480)
    a.add_argument(
        "--results", type=Path, default=ROOT / "benchmarks" / "results", help="torchft_defects.json's folder"
    )
    args = a.parse_args(argv)
    clean = run("kill-and-rejoin", args.out / "unmodified", args.inner_steps, 300.0)
    rows = [["(unmodified)", "kill-and-rejoin", "—", clean["status"], "—"]]
    cells: list[dict[str, object]] = [{"defect": None, "status": clean["status"], "command": clean["command"]}]
    ok = clean["status"] == "pass"
    for defect, (scenario, group) in PLANTED.items():
        entry = {group: ["tests.peers.torchft_defects", "--defect", defect]}
        got = run(scenario, args.out / defect, args.inner_steps, 300.0, entry=entry)
        verdicts: list[dict[str, str]] = got["verdicts"]  # type: ignore[assignment]
        failed = [v["name"] for v in verdicts if v["status"] == "fail"]
        rows.append([defect, scenario, group, str(got["status"]), ", ".join(failed) or "**survives**"])
        cells.append(
            {
                "defect": defect,
                "group": group,
                "status": got["status"],
                "caught_by": failed,
                "summaries": {v["name"]: v["summary"] for v in verdicts if v["status"] == "fail"},
                "final_eval": got["final_eval"],
            }
        )
        ok &= bool(failed)
    table = markdown_table(["defect", "scenario", "planted in", "status", "caught by"], rows)
    write_results(
        "torchft_defects",
        config={"inner_steps": args.inner_steps},
        results={"cells": cells, "all_caught": ok},
        table=table,
        out_dir=args.results,
    )
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
