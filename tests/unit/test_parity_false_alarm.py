"""benchmarks.calibration.parity_false_alarm: the judging of recorded runs (one baseline vs the band), without running any."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.calibration.parity_false_alarm import main


def test_rejudge_counts_false_alarms_both_ways(tmp_path: Path, capsys) -> None:
    runs = [
        {"run": i, "final_eval_loss": 2.43, "delta_same_seed": d, "outside_band": b, "seconds": 55.0}
        for i, (d, b) in enumerate([(0.004, 0.0), (0.012, 0.0), (-0.03, -0.021), (0.06, 0.052)])
    ]
    band = {"low": 2.42, "high": 2.44, "losses": [2.43, 2.35, 2.41], "excess": [0.04, 0.05, 0.054]}
    src = tmp_path / "in.json"
    src.write_text(
        json.dumps({"config": {"load": True, "baseline_seeds": 3}, "results": {"band": band, "runs": runs}})
    )
    assert main(["--rejudge", str(src), "--out-dir", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "parity_false_alarm.json").read_text())
    by = doc["results"]["by_tolerance"]
    assert by["0.005"] == {"one_baseline": 3, "band": 2, "runs": 4}
    assert by["0.02"] == {"one_baseline": 2, "band": 2, "runs": 4}
    assert by["0.05"] == {"one_baseline": 1, "band": 1, "runs": 4}
    assert doc["config"]["rejudged"] is True
    out = capsys.readouterr().out
    assert "4 fault-free runs under load" in out and "excess over their floors 0.0400–0.0540" in out
