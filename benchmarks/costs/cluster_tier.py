"""The cluster tier's verdicts and record: what ``scripts/cluster-test`` saw on the real cluster, scenario by scenario.

    .venv/bin/python -m benchmarks.costs.cluster_tier judge NAME REPORT_JSON --seconds S --append RUNS/results.jsonl
    .venv/bin/python -m benchmarks.costs.cluster_tier record RUNS --command "scripts/cluster-test ..."

``judge``: whether a run showed what it should (:func:`judge`), printed and appended as a line of
``results.jsonl`` (its name, ``ok``, why, its wall seconds, each check's status). ``record``: those lines, with the
tier's command line, commit and machine, to ``benchmarks/results/cluster_test.json``; docs/kubernetes.md's table is
drawn from it by ``benchmarks.doc_tables``. ``scripts/cluster-test`` calls both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, write_results
from chaos.negative_controls import CONTROLS


def statuses(report: dict[str, Any]) -> dict[str, str]:
    """Each check's status in a run's ``report.json``, by check."""
    return {v["name"]: v["status"] for v in report["verdicts"]}


def judge(name: str, report: dict[str, Any]) -> tuple[bool, str]:
    """Whether a run's report (``report.json``) shows what it should: for a negative control
    (:mod:`chaos.negative_controls`), its checker FAILS; for any other scenario every check passes (parity too:
    its band is run on the cluster) and every planned fault was injected. Returns (ok, why).

    >>> ok = {"verdicts": [{"name": "liveness", "status": "pass"}, {"name": "parity", "status": "pass"}],
    ...       "not_run": [], "faults": [{"fault_id": "f0", "kind": "partition", "injected": True}]}
    >>> judge("partition-one", ok)
    (True, 'as expected')
    >>> judge("partition-one", {**ok, "faults": [{"fault_id": "f0", "kind": "bandwidth", "injected": False}]})
    (False, 'fault f0 (bandwidth) was not injected')
    >>> judge("partition-one", {**ok, "verdicts": [{"name": "parity", "status": "indeterminate"}]})
    (False, 'parity is indeterminate')
    >>> judge("never-rejoins", {**ok, "verdicts": [{"name": "reintegration", "status": "pass"}]})
    (False, 'reintegration is pass, not fail')
    """
    status = statuses(report)
    control = next((c for c in CONTROLS if c.name == name), None)
    if control is not None:
        got = status.get(control.must_fail)
        bad = [] if got == "fail" else [f"{control.must_fail} is {got}, not fail"]
    else:
        bad = [f"{k} is {v}" for k, v in status.items() if v != "pass"]
        bad += [f"planned fault {f} did not run" for f in report["not_run"]]
        bad += [
            f"fault {f['fault_id']} ({f['kind']}) was not injected" for f in report["faults"] if not f["injected"]
        ]
    return not bad, "; ".join(bad) or "as expected"


def table(rows: list[dict[str, Any]]) -> str:
    """One row per scenario.

    >>> print(table([{"name": "partition-one", "ok": True, "why": "as expected", "seconds": 84.0,
    ...               "checks": {"liveness": "pass", "parity": "indeterminate"}}]))
    | scenario | as it should be | why | minutes | checks |
    |---|---|---|---|---|
    | partition-one | yes | as expected | 1.4 | liveness pass, parity indeterminate |
    """
    return markdown_table(
        ["scenario", "as it should be", "why", "minutes", "checks"],
        [
            [
                r["name"],
                "yes" if r["ok"] else "**no**",
                r["why"],
                f"{r['seconds'] / 60:.1f}",
                ", ".join(f"{k} {v}" for k, v in r["checks"].items()),
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    j = sub.add_parser("judge", help="judge one run; print why, append its line; exit 1 unless as it should be")
    j.add_argument("name")
    j.add_argument("report", type=Path)
    j.add_argument("--seconds", type=float, required=True)
    j.add_argument("--append", type=Path, required=True)
    r = sub.add_parser("record", help="write the runs' lines to the results file")
    r.add_argument("runs", type=Path, help="cluster-test's runs directory (its results.jsonl)")
    r.add_argument("--command", required=True, help="the tier's command line, as run")
    r.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if args.what == "judge":
        report = json.loads(args.report.read_text())
        ok, why = judge(args.name, report)
        line = {"name": args.name, "ok": ok, "why": why, "seconds": args.seconds, "checks": statuses(report)}
        with args.append.open("a") as out:
            out.write(json.dumps(line) + "\n")
        print(why)
        return 0 if ok else 1
    rows = [json.loads(line) for line in (args.runs / "results.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        ap.error(f"{args.runs}/results.jsonl has no scenario")
    results = {"scenarios": rows, "all_ok": all(r["ok"] for r in rows), "seconds": sum(r["seconds"] for r in rows)}
    path = write_results(
        "cluster_test",
        config={"scenarios": [r["name"] for r in rows]},
        results=results,
        table=table(rows),
        out_dir=args.out_dir,
        command=args.command,
    )
    print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
