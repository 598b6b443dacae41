"""Parity's false-alarm rate: how often a fault-free run fails parity at a given tolerance, as measured.

A parity failure means something only next to how often a run with nothing wrong
fails the same check. ``benchmarks/calibration/parity_false_alarm.py`` runs a no-op scenario
N times (under CPU load) and records how far each fault-free run landed outside
its band (``outside_band``). Any tolerance can be judged from those distances:

    false alarms(t) = #{runs : |outside_band| > t}     rate = false alarms / N, with a 95 % Wilson interval

Every report quotes this rate at its own tolerance, or says why it cannot: the
band was over a different number of seeds, or the benchmark was never run.
It was measured on the built-ins' cluster; a report on another cluster says so.
The benchmark also records each run's distance from its same-seed baseline
(``delta_same_seed``), which is parity's distance when the band is one seed:
a report with ``baseline_seeds: 1`` quotes that.

Example:
    >>> runs = [{"outside_band": d} for d in (0.0, 0.0, -0.0003, 0.012)]
    >>> r = rate_at({"runs": runs, "cluster": "abc"}, {"baseline_seeds": 3, "load": True},
    ...             tolerance=0.01, baseline_seeds=3, cluster="abc")
    >>> r.alarms, r.runs, r.describe()
    (1, 4, '1 of 4 fault-free runs outside the band by more than ±0.01 (95% CI 5%–70%), measured under load on this cluster')
    >>> runs = [{"outside_band": 0.0, "delta_same_seed": d} for d in (0.004, -0.02, 0.001)]
    >>> rate_at({"runs": runs, "cluster": "abc"}, {"baseline_seeds": 3, "load": True},
    ...         tolerance=0.01, baseline_seeds=1, cluster="abc").describe()
    '1 of 3 fault-free runs away from their same-seed baseline by more than ±0.01 (95% CI 6%–79%), measured under load on this cluster'
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.records import SparseRecord

# Where benchmarks/calibration/parity_false_alarm.py writes its results (committed with the repository); an installed copy
# (the image: docker/Dockerfile) finds them under its environment's share/ instead.
NAME = "parity_false_alarm.json"
MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / NAME
INSTALLED = Path(sys.prefix) / "share" / "diloco-chaos" / NAME


def cluster_key(cluster: Any) -> str:
    """The cluster the rate was measured on, whatever its seed or settle time (a trainer.config.RunConfig)."""
    return cluster.fault_free_at(0).config_hash()


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a rate k / n (honest at k = 0, unlike k/n ± …).

    >>> [round(x, 3) for x in wilson(0, 8)]
    [0.0, 0.324]
    """
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def alarms(distances: list[float], tolerance: float) -> int:
    """Runs whose distance exceeds the tolerance (a non-finite distance always does).

    >>> alarms([0.01, -0.06, 0.0, 0.051, float("nan")], 0.05)
    3
    """
    return sum(1 for d in distances if not math.isfinite(d) or abs(d) > tolerance)


@dataclass(frozen=True)
class FalseAlarmRate:
    alarms: int
    runs: int
    low: float
    high: float
    tolerance: float
    under_load: bool
    same_cluster: bool
    measured: str  # when the benchmark finished (UTC, ISO 8601)
    one_baseline: bool = False  # the distances were from the same-seed baseline (a band of one seed)

    def describe(self) -> str:
        where = "this cluster" if self.same_cluster else "the built-ins' cluster, not this run's"
        outside = "away from their same-seed baseline" if self.one_baseline else "outside the band"
        return (
            f"{self.alarms} of {self.runs} fault-free runs {outside} by more than ±{self.tolerance:g} "
            f"(95% CI {self.low:.0%}–{self.high:.0%}), measured{' under load' if self.under_load else ''} "
            f"on {where}"
        )

    def quote(self) -> FalseAlarmQuote:
        return FalseAlarmQuote(
            alarms=self.alarms,
            runs=self.runs,
            low=self.low,
            high=self.high,
            tolerance=self.tolerance,
            under_load=self.under_load,
            same_cluster=self.same_cluster,
            measured=self.measured,
            text=self.describe(),
        )


class FalseAlarmQuote(SparseRecord):
    """What a report says about the rate: the measured numbers and their text, or only the text saying why none."""

    alarms: int | None = None
    runs: int | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None
    under_load: bool | None = None
    same_cluster: bool | None = None
    measured: str | None = None  # when the benchmark finished (UTC, ISO 8601)
    text: str


def rate_at(
    results: dict[str, Any], config: dict[str, Any], *, tolerance: float, baseline_seeds: int, cluster: str
) -> FalseAlarmRate | None:
    """The measured rate at ``tolerance``, or None when the measurement does not apply (another band size)."""
    one = baseline_seeds == 1  # every run's same-seed distance is recorded whatever band size it measured
    if not one and int(config.get("baseline_seeds", -1)) != baseline_seeds:
        return None
    key = "delta_same_seed" if one else "outside_band"
    distances = [float(r[key]) for r in results.get("runs", []) if key in r]
    if not distances:
        return None
    k, n = alarms(distances, tolerance), len(distances)
    lo, hi = wilson(k, n)
    return FalseAlarmRate(
        k,
        n,
        lo,
        hi,
        tolerance,
        bool(config.get("load")),
        results.get("cluster") == cluster,
        str(results.get("finished", "")),
        one,
    )


def measured_rate(
    *, tolerance: float, baseline_seeds: int, cluster: str, path: Path | None = None
) -> FalseAlarmQuote:
    """What a report says about the false-alarm rate: the measured rate, or why there is none."""
    path = path or (MEASURED if MEASURED.exists() else INSTALLED)
    try:
        doc = json.loads(path.read_text())
        results, config = doc["results"], doc["config"]
        rate = rate_at(
            {**results, "finished": doc.get("finished", "")},
            config,
            tolerance=tolerance,
            baseline_seeds=baseline_seeds,
            cluster=cluster,
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        return FalseAlarmQuote(
            text=f"not measured here ({path.name}: {type(err).__name__}); run "
            "benchmarks/calibration/parity_false_alarm.py --load"
        )
    if rate is None:
        return FalseAlarmQuote(
            text=f"not measured for a band over {baseline_seeds} seed(s) (measured: "
            f"{config.get('baseline_seeds')}); run benchmarks/calibration/parity_false_alarm.py --load "
            f"--baseline-seeds {baseline_seeds}"
        )
    return rate.quote()
