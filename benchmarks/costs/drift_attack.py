"""What the drift bound is worth on the real system: a learner that pushes the model the same way every round.

The built-in ``corrupt-learner`` with its corrupt learner in mode ``push`` (trainer.core.corruption: the real
update, its first coordinate of every tensor set to half of what the upload's steps may move it — every upload
passes every per-round check), run with the drift bound enforced (``syncer.drift_k`` at its default) and with it
off (``syncer.drift_k=0``), paired by seed, real learners on the local backend (``benchmarks.harness.run_cluster``:
no baseline). Reported per seed: the final eval loss of each arm, their difference, and the uploads refused for
drift; over seeds the mean difference with its 95% t interval.

    .venv/bin/python -m benchmarks.costs.drift_attack --seeds 400 401 402 403 404
    # writes benchmarks/results/drift_attack.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, markdown_table, write_results
from benchmarks.harness import builtin_cluster, quiet_progress, run_cluster
from benchmarks.measures import final_eval_loss, format_ci, mean_ci95
from trainer import events as ev
from trainer.core.drift import DRIFT_K

ARMS = {"bound": DRIFT_K, "no bound": 0.0}


def run(seed: int, drift_k: float, preset: str, out_root: Path) -> dict[str, Any]:
    """One real run: its final eval loss and what the syncer refused."""
    cluster, schedule = builtin_cluster("corrupt-learner", preset)
    corrupt = [f for f in schedule if f["fault"] == "corrupt"]
    assert len(corrupt) == 1, "the built-in corrupt-learner changed: update this benchmark"
    corrupt[0]["mode"] = "push"
    cluster["syncer"] = {**cluster.get("syncer", {}), "drift_k": drift_k}
    label = f"seed{seed}-{'bound' if drift_k else 'no-bound'}"
    h = run_cluster(label, cluster, out_root, schedule=schedule, seed=seed, progress=quiet_progress)
    events = [e for e in h.events if e.source == "syncer"]
    refused = dict(ev.refusals_by_reason(e for e in events if isinstance(e, ev.Reject)))
    return {"final_loss": final_eval_loss(events), "refused": refused}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[400, 401, 402, 403, 404])
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    rows, diffs = [], []
    with tempfile.TemporaryDirectory(prefix="drift-attack-") as tmp:
        for seed in args.seeds:
            results[str(seed)] = {arm: run(seed, k, args.preset, Path(tmp)) for arm, k in ARMS.items()}
            print(seed, results[str(seed)], flush=True)
    for seed in args.seeds:
        r = results[str(seed)]
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
