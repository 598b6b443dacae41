"""A schedule shrunk in deterministic mode replays against real processes and fails there too."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import main
from chaos.run_report import RunReport
from chaos.scenario import scenario_with
from chaos.search import find_failure
from chaos.strategies import fault_schedules

pytestmark = pytest.mark.chaos


def planted_repro(path: Path) -> Path:
    """Search (kills and latency only, to be quick) with the planted bug on; write the shrunk scenario."""
    template = scenario_with(
        "kill-and-rejoin",
        name="planted",
        schedule=[],
        cluster={"syncer": {"planted_bug": "forget_rejoined"}},
        checks={"reintegration": {"within_s": 10}},
    )
    found = find_failure(
        template, schedules=fault_schedules(kinds=("kill", "latency"), max_faults=3), max_examples=50, seed=0
    )
    assert found is not None and len(found.schedule) <= 3
    return found.write(path)


@pytest.mark.chaos_nightly  # per change: replay is bit for bit in deterministic mode (tests/property)
def test_shrunk_schedule_replays_on_local_processes(chaos_toxiproxy, chaos_run_dir: Path) -> None:
    repro = planted_repro(chaos_run_dir / "repro.yaml")
    out = chaos_run_dir / "replay"
    code = main(
        [
            "replay",
            str(repro),
            "--backend",
            "local",
            "--no-baseline",
            "--quiet",
            "--toxiproxy-url",
            chaos_toxiproxy.url,
            "--out",
            str(out),
        ]
    )
    report = RunReport.read(out / "report.json")
    verdicts = {v.name: v.status for v in report.verdicts}
    assert code == 1 and verdicts["reintegration"] == "fail", verdicts
    assert verdicts["safety"] == "pass" and verdicts["liveness"] == "pass", verdicts
    assert report.teardown.proxies_left == [] and report.teardown.processes_left == []
