"""Can one learner's slow uploads hold every round? Invariant ``round`` re-measured over the real protocol.

Before the hold followed the median learner (docs/security.md, ``round``), one moving average over every upload
set how long a round waited for an announced body: one learner whose uploads crawled stretched every round's hold,
and the honest learners' merges fell to 12% of normal. Here learner-2's link is capped at ``--rate-kbps`` (its
uploads, each legal, take seconds where the others' take milliseconds) for most of a real run of the tiny preset
(real learners, the local backend, Toxiproxy; ``benchmarks.harness.run_cluster``: no baseline), beside the same
run fault-free, paired by seed. Reported: merges per second while the cap is on (the fault-free run over the same
seconds), their ratio, and the merges the two honest learners took part in.

    .venv/bin/python -m benchmarks.costs.round_hold --seeds 500 501 502 503 504
    # writes benchmarks/results/round_hold.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, markdown_table, write_results
from benchmarks.harness import builtin_cluster, quiet_progress, run_cluster
from benchmarks.measures import format_ci
from trainer import events as ev

AT_S, DURATION_S = 3.0, 40.0
HONEST = ("learner-0", "learner-1")


def run(seed: int, rate_kbps: float | None, out_root: Path) -> dict[str, Any]:
    """One real run of throttle-all's cluster, its schedule replaced by learner-2's link capped (None: no fault):
    merges per second in the window the cap covers (from the steady phase's start)."""
    from chaos.history import Phase

    cluster, _ = builtin_cluster("throttle-all")
    schedule = (
        []
        if rate_kbps is None
        else [
            {
                "fault": "bandwidth",
                "rate_kbps": rate_kbps,
                "targets": ["learner-2"],
                "at": AT_S,
                "duration": DURATION_S,
            }
        ]
    )
    label = f"seed{seed}-{'fault-free' if rate_kbps is None else 'slow-uploader'}"
    h = run_cluster(label, cluster, out_root, schedule=schedule, seed=seed, progress=quiet_progress)
    steady = h.phase("steady")
    assert isinstance(steady, Phase), f"run of seed {seed} never reached its steady phase: see {out_root / label}"
    finished = h.of(ev.Finished)  # the budget reached: merges after it only settle
    lo = steady.ts + AT_S + 1.0
    hi = min([steady.ts + AT_S + DURATION_S, *(f.ts for f in finished)])
    merges = [m for m in h.of(ev.Merge) if lo <= m.ts <= hi]
    honest = sum(1 for m in merges if any(p.learner_id in HONEST for p in m.participants))
    uploads = [u for u in h.of(ev.Upload) if u.learner_id == "learner-2" and lo <= u.ts <= hi]
    return {
        "merges_per_s": len(merges) / (hi - lo),
        "honest_merges_per_s": honest / (hi - lo),
        "slow_learner_uploads": len(uploads),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[500, 501, 502, 503, 504])
    ap.add_argument("--rate-kbps", type=float, default=30.0)
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    rows, ratios = [], []
    with tempfile.TemporaryDirectory(prefix="round-hold-") as tmp:
        for seed in args.seeds:
            r = {"slow uploader": run(seed, args.rate_kbps, Path(tmp)), "fault-free": run(seed, None, Path(tmp))}
            results[str(seed)] = r
            print(seed, r, flush=True)
    for seed in args.seeds:
        r = results[str(seed)]
        ratio = r["slow uploader"]["honest_merges_per_s"] / r["fault-free"]["honest_merges_per_s"]
        ratios.append(ratio)
        rows.append(
            [
                seed,
                fmt(r["fault-free"]["honest_merges_per_s"], 3),
                fmt(r["slow uploader"]["honest_merges_per_s"], 3),
                fmt(ratio, 3),
                r["slow uploader"]["slow_learner_uploads"],
            ]
        )
    rows.append(["mean ± 95% t interval", "", "", format_ci(ratios), ""])
    table = markdown_table(
        [
            "seed (tiny preset)",
            "merges with an honest learner per s, fault-free",
            f"the same, learner-2's link at {fmt(args.rate_kbps)} KB/s",
            "ratio",
            "learner-2's uploads in the window",
        ],
        rows,
    )
    print(table)
    config = {"seeds": args.seeds, "rate_kbps": args.rate_kbps, "window_s": [AT_S + 1.0, AT_S + DURATION_S]}
    path = write_results("round_hold", config=config, results=results, table=table)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
