"""The search finds a planted bug, shrinks it to a minimal schedule, and the written file replays it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import chaos.search
from benchmarks.costs.search_phases import BUGGY, CHECKS
from chaos.analysis import REPORT_SCHEMA_VERSION
from chaos.cli import main
from chaos.replay import replay_scenario
from chaos.run_report import RunReport
from chaos.scenario import load_scenario, scenario_with
from chaos.search import find_failure
from chaos.sim import simulate
from chaos.strategies import FaultSchedule

pytestmark = pytest.mark.chaos_simulation

# The planted-bug template (BUGGY, whose search benchmarks/costs/search_phases.py times) without its bug.
HEALTHY = scenario_with(
    "kill-and-rejoin", name="planted", schedule=[], cluster={"token_budget": 1_200_000}, checks=CHECKS
)


@pytest.fixture(scope="module")
def found():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chaos.search, "simulate", spy := TraceSpy())
        f = find_failure(BUGGY, max_examples=200, seed=0)
    assert f is not None, "the search missed the planted bug in 200 schedules"
    assert spy.runs > f.examples_run >= 2, "expected a failing example, shrink steps and the final run"
    assert spy.traced == 0, (
        f"{spy.traced} of {spy.runs} simulated runs ran under a tracer (Hypothesis' explain phase)"
    )
    return f


class TraceSpy:
    """Calls the real simulator, counting runs made under a Python tracer (``sys.settrace``, Hypothesis' tracer on
    Python 3.11): after the first failing example its explain phase traced every run, ~3x slower each."""

    def __init__(self) -> None:
        self.runs = self.traced = 0

    def __call__(self, *args, **kwargs):
        self.runs += 1
        self.traced += sys.gettrace() is not None
        return simulate(*args, **kwargs)


def test_search_finds_the_planted_bug_and_shrinks_it_to_at_most_three_faults(found) -> None:
    assert len(found.schedule) <= 3, found.schedule.describe()
    # The bug only bites a learner that comes back as a new incarnation.
    assert any(f.kind in ("kill", "stop", "corrupt") for f in found.schedule.faults), found.schedule.describe()
    # The planted bug keeps the rejoining learner out (reintegration) and hands its new incarnation the old one's
    # incarnation index, so it trains its first incarnation's data again (the ledger's data book).
    assert [v.name for v in found.result.failed()] in (["reintegration"], ["reintegration", "ledger"])


def test_the_shrunk_schedule_passes_without_the_bug(found) -> None:
    healthy = found.scenario.model_copy(update={"cluster": HEALTHY.cluster})
    assert not simulate(healthy).failed("reintegration", "liveness", "safety", "durability")


def test_the_written_scenario_replays_the_failure_bit_for_bit(found, tmp_path: Path) -> None:
    path = found.write(tmp_path / "repro.yaml")
    again = simulate(load_scenario(path))
    assert again.failed("reintegration")
    assert again.history_json() == found.result.history_json()
    assert "diloco-chaos replay" in path.read_text()


def test_replay_of_a_run_directory_reuses_its_recorded_plan(tmp_path: Path) -> None:
    s = scenario_with("random-mix", cluster={"token_budget": 1_200_000})
    first = simulate(s)
    first.write(tmp_path / "run")
    assert RunReport.read(tmp_path / "run" / "report.json").schema_version == REPORT_SCHEMA_VERSION
    again = replay_scenario(tmp_path / "run")
    recorded = first.history.plan()
    assert recorded is not None
    assert [f.id for f in again.schedule] == [f.fault_id for f in recorded.faults]
    assert again.random is None
    assert simulate(again).history_json().count('"action":"inject"') == first.history_json().count(
        '"action":"inject"'
    )


def test_cli_search_writes_a_repro_and_replay_sim_fails_on_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "repro.yaml"
    code = main(
        [
            "search",
            "kill-and-rejoin",
            "--set",
            "cluster.syncer.planted_bug=forget_rejoined",
            "--set",
            "cluster.token_budget=1200000",
            "--set",
            "checks.reintegration.within_s=10",
            "--kinds",
            "kill,latency",
            "--examples",
            "50",
            "--out",
            str(out),
        ]
    )
    assert code == 1 and out.exists()
    assert "FAIL after shrinking: kill" in capsys.readouterr().out
    assert main(["replay", str(out), "--backend", "sim", "--out", str(tmp_path / "r")]) == 1
    report = (tmp_path / "r" / "report.md").read_text()
    assert "reintegration" in report


def test_cli_search_without_a_bug_finds_nothing(tmp_path: Path, capsys) -> None:
    # The CLI path (exit 0, no repro written); that healthy runs pass generated schedules is test_sim_properties'
    # job. Three examples: each is a whole simulated run (~15 s here).
    code = main(
        [
            "search",
            "kill-and-rejoin",
            "--set",
            "cluster.token_budget=1200000",
            "--kinds",
            "kill,latency",
            "--examples",
            "3",
            "--out",
            str(tmp_path / "none.yaml"),
        ]
    )
    assert code == 0 and not (tmp_path / "none.yaml").exists()
    assert "no failing schedule in 3 simulated schedule(s)" in capsys.readouterr().out  # it ran them: not vacuous


def test_an_empty_schedule_is_a_valid_schedule() -> None:
    assert FaultSchedule(()).describe() == "none"
