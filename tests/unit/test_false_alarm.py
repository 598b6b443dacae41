"""chaos.false_alarm: the measured false-alarm rate every report quotes, or why it has none."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.calibration.parity_false_alarm import no_op_scenario
from chaos.checkers.parity import tolerance_of
from chaos.false_alarm import MEASURED, cluster_key, measured_rate
from chaos.scenario import builtin_scenarios, load_scenario

RUNS = [{"outside_band": d} for d in (0.0, 0.0, -0.02, 0.07, 0.0)]


def _write(tmp_path: Path, runs=RUNS, seeds: int = 3, cluster: str = "c1") -> Path:
    p = tmp_path / "fa.json"
    p.write_text(
        json.dumps(
            {
                "finished": "2026-12-01T00:00:00+00:00",
                "config": {"baseline_seeds": seeds, "load": True},
                "results": {"runs": runs, "cluster": cluster},
            }
        )
    )
    return p


def test_rate_is_judged_at_the_reports_own_tolerance(tmp_path: Path) -> None:
    p = _write(tmp_path)
    at = {t: measured_rate(tolerance=t, baseline_seeds=3, cluster="c1", path=p) for t in (0.01, 0.05, 0.15)}
    assert [at[t].alarms for t in (0.01, 0.05, 0.15)] == [2, 1, 0]
    high = at[0.15].high
    assert at[0.15].runs == 5 and at[0.15].low == 0.0 and high is not None and 0.4 < high < 0.5
    assert at[0.05].text.startswith("1 of 5 fault-free runs outside the band by more than ±0.05")
    assert at[0.05].same_cluster and "on this cluster" in at[0.05].text
    assert at[0.05].measured == "2026-12-01T00:00:00+00:00"


def test_another_cluster_or_band_size_or_no_file_is_said_not_hidden(tmp_path: Path) -> None:
    other = measured_rate(tolerance=0.05, baseline_seeds=3, cluster="c2", path=_write(tmp_path))
    assert not other.same_cluster and "the built-ins' cluster, not this run's" in other.text
    seeds = measured_rate(tolerance=0.05, baseline_seeds=5, cluster="c1", path=_write(tmp_path))
    assert seeds.model_dump() == {
        "text": "not measured for a band over 5 seed(s) (measured: 3); run "
        "benchmarks/calibration/parity_false_alarm.py --load --baseline-seeds 5"
    }
    missing = measured_rate(tolerance=0.05, baseline_seeds=3, cluster="c1", path=tmp_path / "absent.json")
    assert missing.text.startswith("not measured here (absent.json: FileNotFoundError)")
    (tmp_path / "bad.json").write_text("{not json")
    assert (
        "JSONDecodeError"
        in measured_rate(tolerance=0.05, baseline_seeds=3, cluster="c1", path=tmp_path / "bad.json").text
    )
    empty = measured_rate(tolerance=0.05, baseline_seeds=3, cluster="c1", path=_write(tmp_path, runs=[]))
    assert empty.text.startswith("not measured")


def test_a_one_seed_band_is_judged_by_the_same_seed_distances_whatever_band_was_measured(tmp_path: Path) -> None:
    # A band of one seed is the same-seed baseline: the benchmark records every run's distance from it.
    runs = [{"outside_band": 0.0, "delta_same_seed": d} for d in (0.004, -0.03, 0.06)]
    one = measured_rate(tolerance=0.02, baseline_seeds=1, cluster="c1", path=_write(tmp_path, runs=runs))
    assert (one.alarms, one.runs) == (2, 3)
    assert one.text.startswith("2 of 3 fault-free runs away from their same-seed baseline by more than ±0.02")
    band = measured_rate(tolerance=0.02, baseline_seeds=3, cluster="c1", path=_write(tmp_path, runs=runs))
    assert band.alarms == 0 and "outside the band" in band.text
    older = measured_rate(tolerance=0.02, baseline_seeds=1, cluster="c1", path=_write(tmp_path))  # no such field
    assert older.text.startswith("not measured")


def test_a_non_finite_distance_is_always_a_false_alarm(tmp_path: Path) -> None:
    p = _write(tmp_path, runs=[{"outside_band": float("inf")}, {"outside_band": 0.0}])
    assert measured_rate(tolerance=10.0, baseline_seeds=3, cluster="c1", path=p).alarms == 1


def test_the_committed_measurement_covers_every_built_in() -> None:
    # The committed benchmark was run on the no-op scenario's cluster, which every built-in shares (their
    # settle_s and seed aside): a built-in's report quotes a rate measured on its own cluster.
    doc = json.loads(MEASURED.read_text())
    assert doc["results"]["cluster"] == cluster_key(no_op_scenario(3).cluster)
    for path in builtin_scenarios().values():
        s = load_scenario(path)
        tolerance = tolerance_of(s.checks.parity, doc["results"]["band"]["excess"])  # the measured band's
        assert tolerance is not None, s.name  # the measured band has enough runs to derive one
        r = measured_rate(
            tolerance=tolerance, baseline_seeds=s.checks.parity.baseline_seeds, cluster=cluster_key(s.cluster)
        )
        assert r.same_cluster and r.runs is not None and r.runs >= 8, (s.name, r)
