"""What state size costs: checkpoint writes, a rejoining learner's state fetch and its reintegration, per preset.

For each preset (trainer/presets.py) one ``kill-and-rejoin`` chaos run on local processes (no baseline): learner-1 is
SIGKILLed and restarted, fetches every fragment's current value (GetState) and trains again. From the run's history:
the syncer's state (parameters and outer momentum, fp32) and its checkpoint files; each checkpoint write (fsync
included, median and max); every state fetch of the run (the three first joins and the rejoin; median); and the
rejoined learner's reintegration (from its restart to its first merged upload, as the reintegration check measures
it). A restarted learner's time includes its JAX start-up, which grows with the model too.

    .venv/bin/python -m benchmarks.costs.state_size [--presets tiny,small,wide] [--budget 400000]

Writes ``benchmarks/results/state_size.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import fmt, markdown_table, write_results


def measure(preset: str, budget: int | None, out: Path) -> dict:
    from chaos.history import History
    from trainer import events as ev

    cmd = [sys.executable, "-m", "chaos.cli", "run", "kill-and-rejoin", "--preset", preset, "--no-baseline"]
    cmd += ["--quiet", "--no-metrics", "--out", str(out)]
    if budget is not None:
        cmd += ["--set", f"cluster.token_budget={budget}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    report = json.loads((out / "report.json").read_text())
    if proc.returncode not in (0, 3):  # 3: indeterminate (parity has no baseline here)
        raise SystemExit(
            f"{preset}: the run failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    h = History.read(out)
    ckpts = [e.seconds for e in h.of(ev.Checkpoint)]
    fetches = [e.seconds for e in h.of(ev.StateFetch)]
    files = sorted((out / "checkpoints").glob("ckpt-*.npz"))
    reint = next(v for v in report["verdicts"] if v["name"] == "reintegration")
    rejoin = [r["seconds"] for r in reint["evidence"].get("learners", [])]
    return {
        "preset": preset,
        "checkpoint_bytes": files[-1].stat().st_size if files else None,
        "checkpoints": len(ckpts),
        "checkpoint_s_median": statistics.median(ckpts) if ckpts else None,
        "checkpoint_s_max": max(ckpts) if ckpts else None,
        "state_fetches": len(fetches),
        "state_fetch_s_median": statistics.median(fetches) if fetches else None,
        "state_fetch_s_max": max(fetches) if fetches else None,
        "reintegration_s": rejoin[0] if rejoin else None,
        "verdicts": {v["name"]: v["status"] for v in report["verdicts"]},
        "wall_s": report.get("wall_s"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="tiny,small,wide")
    ap.add_argument(
        "--budget", type=int, default=400_000, help="tokens per run (the cost measured does not need a long run)"
    )
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="state-size-") as tmp:
        for preset in args.presets.split(","):
            r = measure(preset, args.budget, Path(tmp) / preset)
            print(r, flush=True)
            rows.append(r)
    table = markdown_table(
        (
            "preset",
            "checkpoint (params + outer momentum)",
            "checkpoint write s (median / max)",
            "state fetch s (median / max)",
            "rejoin: restart to merged again, s",
        ),
        [
            (
                r["preset"],
                f"{r['checkpoint_bytes'] / 1e6:.1f} MB" if r["checkpoint_bytes"] else "—",
                f"{fmt(r['checkpoint_s_median'])} / {fmt(r['checkpoint_s_max'])}",
                f"{fmt(r['state_fetch_s_median'])} / {fmt(r['state_fetch_s_max'])}",
                fmt(r["reintegration_s"]),
            )
            for r in rows
        ],
    )
    print(table)
    write_results(
        "state_size",
        config={"presets": args.presets.split(","), "budget": args.budget, "scenario": "kill-and-rejoin"},
        results={"runs": rows},
        table=table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
