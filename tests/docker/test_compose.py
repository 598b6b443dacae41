"""The compose deployment: real containers, the containerised Toxiproxy, faults through the Docker API.

Needs the Docker engine, Compose v2 and the project's images (``scripts/install-docker`` and
``scripts/build-images``; ``scripts/test`` runs both). The deployment is the repository's own
``docker-compose.yml``; every test leaves it stopped and removed (``docker compose down -v``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.history import History
from tests.chaos.test_builtin_scenarios import partition_stops_uploads, syncer_restored, throttle_slows_uploads
from trainer import events as ev

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
UNITS = ["toxiproxy", "syncer", "learner-0", "learner-1", "learner-2", "learner-3"]


def compose(*args: str, check: bool = True, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "compose", *args], cwd=REPO, capture_output=True, text=True, check=check,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def deployment() -> Iterator[None]:
    """The units up and idle (waiting for a run), torn down afterwards whatever happened."""
    compose("down", "-v", "--remove-orphans", check=False)
    compose("up", "-d", *UNITS)
    try:
        yield
    finally:
        compose("down", "-v", "--remove-orphans", check=False, timeout=300)


def run_on_docker(name: str, out: Path, *sets: str) -> dict:
    """``diloco-chaos run NAME --backend docker`` from the host against the deployment."""
    cmd = [sys.executable, "-m", "chaos.cli", "run", name, "--backend", "docker", "--out", str(out),
           "--baseline-cache", str(out.parent / "baselines")]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert (out / "report.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    report["_exit"] = proc.returncode
    report["_output"] = proc.stdout[-3000:]
    return report


def _passed(report: dict) -> None:
    failed = [f"{v['name']}: {v['status']}: {v['summary']}" for v in report["verdicts"] if v["status"] != "pass"]
    assert not failed and report["_exit"] == 0, failed or report["_output"]
    assert report["teardown"]["proxies_left"] == [] and report["teardown"]["processes_left"] == []


def test_compose_up_runs_the_default_scenario_and_reports_on_the_host(tmp_path) -> None:
    reports = REPO / "reports"
    before = set(reports.glob("*")) if reports.exists() else set()
    compose("down", "-v", "--remove-orphans", check=False)
    try:
        up = compose("up", env={"DILOCO_LEARNERS": "3"}, timeout=1500)
        logs = compose("logs", "controller", check=False).stdout
    finally:
        compose("down", "-v", "--remove-orphans", check=False, timeout=300)
    new = sorted(set(reports.glob("kill-and-rejoin-*")) - before)
    assert new, up.stdout[-3000:]
    report = json.loads((new[-1] / "report.json").read_text())
    assert report["status"] == "pass", [v for v in report["verdicts"] if v["status"] != "pass"]
    assert (new[-1] / "report.md").exists() and (new[-1] / "timeline.png").exists()
    assert "PASS" in logs  # the verdict is printed


def test_container_kill_restart_rejoins(deployment, tmp_path) -> None:
    report = run_on_docker("kill-and-rejoin", tmp_path / "kill")
    _passed(report)
    history = History.read(tmp_path / "kill")
    starts = [e for e in history.of(ev.LearnerStart) if e.learner_id == "learner-1"]
    assert len(starts) == 2, "the killed learner's container was not started again"
    assert (tmp_path / "kill" / "logs" / "learner-1.log").stat().st_size > 0  # container logs collected


def test_syncer_container_resumes_from_its_checkpoint_volume(deployment, tmp_path) -> None:
    report = run_on_docker("syncer-crash", tmp_path / "crash")
    _passed(report)
    syncer_restored(History.read(tmp_path / "crash"), _Result(report))


def test_toxiproxy_partition_and_bandwidth_between_containers(deployment, tmp_path) -> None:
    for name, effect in (("partition-one", partition_stops_uploads), ("throttle-all", throttle_slows_uploads)):
        report = run_on_docker(name, tmp_path / name)
        _passed(report)
        effect(History.read(tmp_path / name), _Result(report))


class _Result:
    """The slice of chaos.controller.RunResult the effect checks read, rebuilt from report.json."""

    def __init__(self, report: dict) -> None:
        from chaos.checkers import Verdict

        self.report = report
        self.verdicts = [Verdict(v["name"], v["status"], v["summary"], v["evidence"]) for v in report["verdicts"]]
