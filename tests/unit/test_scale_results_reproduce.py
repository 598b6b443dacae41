"""The scale simulator's committed results are what it computes now.

Its benchmarks' results files are what docs/scale-simulator.md and docs/benchmarks.md render, and the simulator is
deterministic, so a change to it either leaves them exactly as they are or re-records them (the sim-to-real file
had quietly drifted from the code once). The two quick ones are recomputed here; the paper's table, minutes of
simulated weeks, is checked by ``benchmarks.costs.scale_speed``'s identical-output rule on its largest case.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.claims import scale_bandwidth, scale_sim_to_real

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _committed(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return doc


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))  # tuples as lists, as the results file holds them


def test_sim_to_real_predictions_are_the_committed_ones() -> None:
    committed = _committed("scale_sim_to_real")
    assert committed["config"]["rejoin_source"].startswith("REJOIN_S")  # recorded without --runs
    measured = _committed("goodput")
    cal = scale_sim_to_real.calibrate(measured, scale_sim_to_real.REJOIN_S)
    assert cal == committed["config"]["calibration"]
    predicted = scale_sim_to_real.predict(measured, cal)
    assert _as_json([c.to_json() for c in predicted]) == committed["results"]["runs"]


def test_bandwidth_runs_are_the_committed_ones() -> None:
    committed = _committed("scale_bandwidth")
    simulated = scale_bandwidth.simulate_runs(argparse.Namespace(**committed["config"]))
    assert _as_json(scale_bandwidth.result_rows(simulated)) == committed["results"]["runs"]
