"""The compose units' pure parts: which container is which learner, and the command each becomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.backends.docker import CONTAINER_NUMBER, _service_of, _unit_of
from chaos.backends.unit import ActiveRun, LearnerSlot, command, retire
from chaos.container_probe import METRICS_PORT


def test_a_learner_replica_finds_its_id_by_host_name_and_the_plan_survives_json(tmp_path: Path) -> None:
    run = ActiveRun(
        "/runs/work/x", "tok", {"learner-0": LearnerSlot("toxiproxy:26000")}, hosts={"3f2a9c0d1e4b": "learner-0"}
    )
    run.write(tmp_path / "active.json")
    back = ActiveRun.read(tmp_path / "active.json")
    assert back == run
    assert back.unit_of("learner", "3f2a9c0d1e4b") == "learner-0"
    assert back.unit_of("learner", "another-replica") is None  # not used by this run: it waits
    assert back.unit_of("syncer", "anything") == "syncer"


def test_a_finished_run_retires_its_active_file_and_leaves_another_runs(tmp_path: Path) -> None:
    path = tmp_path / "active.json"
    ours = ActiveRun("/runs/work/ours", "tok")
    for other in (ActiveRun("/runs/work/next", "tok"), ActiveRun("/runs/work/ours", "another-token")):
        other.write(path)
        assert retire(ours, path) is None and ActiveRun.read(path) == other  # not ours: left for its controller
    ours.write(path)
    assert retire(ours, path) is None and not path.exists()
    assert retire(ours, path) is None  # nothing there: nothing to do


def test_every_unit_serves_metrics_on_the_probed_port() -> None:
    run = ActiveRun("/runs/work/x", "tok", {"learner-1": LearnerSlot("toxiproxy:26001", "nan")})
    for unit in ("syncer", "learner-1"):
        cmd = command(unit, run)
        assert cmd is not None and cmd[cmd.index("--metrics-port") + 1] == str(METRICS_PORT)
        assert cmd[cmd.index("--metrics-host") + 1] == "0.0.0.0"
    corrupt = command("learner-1", run)
    assert corrupt is not None and corrupt[-2:] == ["--corrupt", "nan"]
    assert command("learner-2", run) is None


@pytest.mark.parametrize("unit", ["syncer", "toxiproxy", "learner-0", "learner-11"])
def test_unit_names_and_compose_labels_map_both_ways(unit: str) -> None:
    service, number = _service_of(unit)
    labels = {"com.docker.compose.service": service, **({CONTAINER_NUMBER: str(number)} if number else {})}
    assert _unit_of(labels) == unit
