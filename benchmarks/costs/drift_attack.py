"""What the drift bound is worth on the real system: a learner that pushes the model the same way every round.

The built-in ``corrupt-learner`` with its corrupt learner in mode ``push`` (trainer.core.corruption: the real
update, its first coordinate of every tensor set to half of what the upload's steps may move it — every upload
passes every per-round check), run with the drift bound enforced (``syncer.drift_k`` at its default) and with it
off (``syncer.drift_k=0``), paired by seed, real learners on the local backend, no baseline. Reported per seed:
the final eval loss of each arm, their difference, and the uploads refused for drift; over seeds the mean
difference with its 95% t interval.

    .venv/bin/python -m benchmarks.costs.drift_attack --seeds 400 401 402 403 404
    # writes benchmarks/results/drift_attack.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, markdown_table, write_results
from benchmarks.measures import final_eval_loss, format_ci, mean_ci95
from chaos.scenario import resolve
from trainer import events as ev
from trainer.core.drift import DRIFT_K

ARMS = {"bound": DRIFT_K, "no bound": 0.0}


def run(seed: int, drift_k: float, preset: str) -> dict[str, Any]:
    """One real run: its final eval loss and what the syncer refused."""
    text = resolve("corrupt-learner").read_text()
    assert "mode: nan" in text, "the built-in corrupt-learner changed: update this benchmark"
    with tempfile.TemporaryDirectory(prefix="drift-attack-") as tmp:
        scenario = Path(tmp) / "pushing-learner.yaml"
        scenario.write_text(text.replace("mode: nan", "mode: push"))
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "chaos.cli", "run", str(scenario), "--seed", str(seed), "--preset", preset]
        cmd += ["--set", f"cluster.syncer.drift_k={drift_k}", "--no-baseline", "--quiet", "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        events = ev.read_events(out / "events" / "syncer.jsonl")
    refused = dict(ev.refusals_by_reason(e for e in events if isinstance(e, ev.Reject)))
    return {"final_loss": final_eval_loss(events), "refused": refused, "exit": proc.returncode}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[400, 401, 402, 403, 404])
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    rows, diffs = [], []
    for seed in args.seeds:
        results[str(seed)] = {arm: run(seed, k, args.preset) for arm, k in ARMS.items()}
        r = results[str(seed)]
        print(seed, r, flush=True)
        a, b = r["bound"]["final_loss"], r["no bound"]["final_loss"]
        if a is not None and b is not None:
            diffs.append(b - a)
        rows.append(
            [
                seed,
                fmt(a, 4) if a is not None else "—",
                fmt(b, 4) if b is not None else "—",
                fmt(b - a, 3) if a is not None and b is not None else "—",
                r["bound"]["refused"].get("drift", 0),
            ]
        )
    summary: dict[str, Any] = {}
    if diffs:
        mean, half = mean_ci95(diffs)
        summary = {
            "loss_increase_without_bound": mean,
            "ci95_half_width": half,
            "seeds_worse": sum(d > 0 for d in diffs),
        }
        rows.append(
            [
                "mean ± 95% t interval",
                "",
                "",
                format_ci(diffs),
                f"worse without: {summary['seeds_worse']} of {len(diffs)}",
            ]
        )
    table = markdown_table(
        [
            f"seed ({args.preset} preset, one learner pushing)",
            "final eval loss, drift bound",
            "final eval loss, no bound",
            "no bound − bound",
            "uploads refused for drift",
        ],
        rows,
    )
    print(table)
    config = {"seeds": args.seeds, "preset": args.preset, "arms": ARMS}
    path = write_results("drift_attack", config=config, results={"runs": results, "summary": summary}, table=table)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
