"""The soak (issue 41; docs/security.md, "Soak"): a long run of seeded random faults on two honest learners beside
one hostile insider, every check judged, and the syncer's resources sampled all through.

The insider, learner-2, is restarted as a corrupt learner uploading garbage (absurd magnitudes) from the start to
60% of the run, then healed: the checks must see it refused every time and merged again once healthy. The honest
learners draw a kill, a partition, a pause or a connection reset every ~30 s (2–8 s each). The syncer is sampled
every ``--every`` seconds from /proc and its own outputs: resident memory, open file descriptors, the bytes of
its event log, and the bytes of its /metrics page. Growth per hour is the least-squares slope over the run's
second half (the first half holds start-up and the JIT's warm-up).

    .venv/bin/python -m benchmarks.costs.soak --minutes 60 --seed 1   # writes benchmarks/results/soak.json

The nightly tier runs the same (tests/nightly/test_soak.py) and asserts the bounds of :data:`BOUNDS`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, markdown_table, write_results

TOKENS_PER_S = 45_000  # above the tiny preset's random-mix throughput here (~40k/s idle): a run outlasts its plan
HONEST, INSIDER = ("learner-0", "learner-1"), "learner-2"
KINDS = ("kill", "partition", "pause", "reset_peer")
# Per hour of soak, after the first half: what "flat" means for each sampled figure.
BOUNDS = {"rss_mb": 64.0, "fds": 16.0, "metrics_kb": 16.0}


def soak_scenario(minutes: float, seed: int) -> Any:
    """random-mix stretched to ``minutes``, faults on the honest learners only, learner-2 the hostile insider."""
    from chaos.scenario import scenario_with

    total = minutes * 60.0
    return scenario_with(
        "random-mix",
        name="soak",
        description="the soak: random faults on two honest learners beside a hostile insider (benchmarks.costs.soak)",
        seed=seed,
        cluster={"seed": seed, "token_budget": int(TOKENS_PER_S * total)},
        schedule=[{"fault": "corrupt", "mode": "garbage", "targets": [INSIDER], "at": 3, "duration": 0.6 * total}],
        random={
            "count": max(int(minutes * 2), 1),
            "window": [5, 0.8 * total],
            "duration": [2, 8],
            "min_gap_s": 5,
            "faults": [{"fault": k, "targets": [lid]} for k in KINDS for lid in HONEST],
        },
        timeout_s=2 * total + 900,
        checks={"parity": {"enabled": False}},
    )


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since sampling began
    pid: int
    rss_mb: float
    fds: int
    events_kb: float
    metrics_kb: float | None


class Sampler:
    """Samples the run's current syncer process (the pid its newest ``syncer_start`` event names) on a thread."""

    def __init__(self, run_dir: Path, every_s: float) -> None:
        self.run_dir, self.every_s = run_dir, every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._pid, self._offset = 0, 0
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _syncer_pid(self) -> int:
        path = self.run_dir / "events" / "syncer.jsonl"
        if path.exists():
            with open(path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
            for line in chunk[:end].split(b"\n"):
                if b'"syncer_start"' in line:
                    self._pid = int(json.loads(line)["pid"])
            self._offset += end
        return self._pid

    def _metrics_kb(self) -> float | None:
        try:
            target = json.loads((self.run_dir / "metrics" / "syncer.json").read_text())[0]["targets"][0]
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=5) as r:  # noqa: S310 - our own server
                return len(r.read()) / 1024
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def sample(self) -> Sample | None:
        pid = self._syncer_pid()
        if not pid:
            return None
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        except (OSError, StopIteration):
            return None  # between a syncer's death and its successor's start
        events = sum(p.stat().st_size for p in (self.run_dir / "events").glob("syncer*.jsonl"))
        return Sample(time.monotonic() - self._t0, pid, rss_kb / 1024, fds, events / 1024, self._metrics_kb())

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            s = self.sample()
            if s is not None:
                self.samples.append(s)


def serving(samples: list[Sample]) -> list[Sample]:
    """The samples of the last syncer process taken while it served (its /metrics answered): not its start-up or
    its shutdown at the run's end."""
    up = [s for s in samples if s.metrics_kb is not None]
    return [s for s in up if s.pid == up[-1].pid] if up else []


def per_hour(samples: list[Sample], field: str) -> float | None:
    """Least-squares growth per hour of ``field`` over the second half of the :func:`serving` samples.

    >>> per_hour([Sample(t, 1, 100 + t / 360, 9, 0.0, 8.0) for t in range(0, 7200, 60)], "rss_mb")
    10.0
    """
    last = serving(samples)
    half = [s for s in last if s.t >= (last[0].t + last[-1].t) / 2] if last else []
    points = [(s.t, getattr(s, field)) for s in half if getattr(s, field) is not None]
    if len(points) < 3 or points[-1][0] - points[0][0] <= 0:
        return None
    slope = statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope
    return round(slope * 3600, 3)


def soak(minutes: float, seed: int, out: Path, every_s: float = 10.0) -> dict[str, Any]:
    """Run the soak into ``out``; its verdicts, the samples' figures and the growth per hour."""
    from chaos.controller import RunOptions, run_scenario

    scenario = soak_scenario(minutes, seed)
    with Sampler(out, every_s) as sampler:
        t0 = time.monotonic()
        result = run_scenario(scenario, RunOptions(out, baseline=False, progress=None))
        took = time.monotonic() - t0
    samples = sampler.samples
    growth = {f: per_hour(samples, f) for f in ("rss_mb", "fds", "events_kb", "metrics_kb")}
    up = serving(samples)
    first = up[0] if up else None
    last = up[-1] if up else None
    return {
        "minutes": minutes,
        "seed": seed,
        "run_s": round(took, 1),
        "status": result.status,
        "verdicts": {v.name: v.status for v in result.verdicts},
        "syncer_processes": len({s.pid for s in samples}),
        "first": asdict(first) if first else None,
        "last": asdict(last) if last else None,
        "per_hour": growth,
        "bounds_per_hour": BOUNDS,
        "samples": len(samples),
        "series": [asdict(x) for x in samples],
    }


def table(r: dict[str, Any]) -> str:
    rows = []
    for f, unit in (("rss_mb", "MB"), ("fds", "fds"), ("events_kb", "KB"), ("metrics_kb", "KB")):
        first, last = (r["first"] or {}).get(f), (r["last"] or {}).get(f)
        bound = BOUNDS.get(f)
        rows.append(
            [f"syncer {f.split('_')[0]} ({unit})", fmt(first), fmt(last), fmt(r["per_hour"][f]), fmt(bound)]
        )
    verdicts = ", ".join(f"{name} {status}" for name, status in r["verdicts"].items())
    rows.append([f"the run: {r['run_s']} s, {r['samples']} samples", "", "", f"checks: {verdicts}", ""])
    return markdown_table(["figure", "first sample", "last sample", "growth per hour (2nd half)", "bound"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--out", type=Path, default=None, help="the run directory (default: a new temporary one)")
    ap.add_argument("--results-name", default="soak")
    args = ap.parse_args(argv)
    import tempfile

    out = args.out or Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    r = soak(args.minutes, args.seed, out, args.every)
    t = table(r)
    print(t)
    print(json.dumps({k: r[k] for k in ("status", "verdicts", "run_s", "per_hour")}, indent=2))
    path = write_results(
        args.results_name,
        config={"minutes": args.minutes, "seed": args.seed, "every_s": args.every},
        results=r,
        table=t,
    )
    print(f"wrote {path}; run directory {out}")
    return 0 if r["status"] == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
