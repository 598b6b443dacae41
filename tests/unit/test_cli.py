"""The ``diloco-chaos`` command line: list, validate, and error exits (no runs here; the chaos suite runs)."""

from __future__ import annotations

import json

import pytest

from chaos.cli import EXIT_ERROR, EXIT_PASS, main
from chaos.scenario import builtin_scenarios


def test_list_names_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == EXIT_PASS
    out = capsys.readouterr().out
    for name in builtin_scenarios():
        assert name in out


def test_validate_builtins_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *builtin_scenarios()]) == EXIT_PASS
    assert capsys.readouterr().out.count(": ok") == len(builtin_scenarios())


def test_validate_bad_file_exits_2_naming_file_and_field(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nschedule:\n  - {fault: kill, targets: [learner-0], at: 1}\n")
    good = builtin_scenarios()["kill-and-rejoin"]
    assert main(["validate", str(good), str(bad)]) == EXIT_ERROR  # one bad file fails the whole call
    err = capsys.readouterr().err
    assert str(bad) in err and "schedule.0" in err and "duration" in err


def test_run_unknown_scenario_exits_2_listing_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "no-such-scenario"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "no-such-scenario" in err and "kill-and-rejoin" in err


def test_run_bad_override_exits_2_before_starting_anything(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    code = main(["run", "kill-and-rejoin", "--out", str(out), "--set", "cluster.algorithm.min_quorum=9"])
    assert code == EXIT_ERROR
    assert "min_quorum" in capsys.readouterr().err
    assert not out.exists()


def test_report_on_a_directory_that_is_not_a_run(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == EXIT_ERROR
    assert "scenario.json" in capsys.readouterr().err


def test_seed_override_changes_the_random_plan(capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import _load
    from chaos.fault_plan import plan

    a = [p.record().model_dump(mode="json") for p in plan(_load("random-mix"))]
    b = [p.record().model_dump(mode="json") for p in plan(_load("random-mix", seed=7))]
    assert a != b
    assert json.dumps(a) == json.dumps([p.record().model_dump(mode="json") for p in plan(_load("random-mix"))])


def test_a_run_directory_with_a_corrupt_event_is_an_error_naming_the_line(tmp_path, capsys) -> None:
    """A damaged events file is bad input: an error of the project's root naming the file and line, which the CLI
    prints and exits 2 on (the test below). Before one exception root, `diloco-chaos report` on such a directory
    ended in a traceback and exit 1, the code for a failed check."""
    from chaos.history import History

    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "learner-0.jsonl").write_text('{"kind": "merge", "ts": "x"}\n')
    from trainer.errors import DilocoChaosError

    with pytest.raises(DilocoChaosError, match=r"learner-0\.jsonl:1"):
        History.read(tmp_path)


@pytest.mark.parametrize(
    "err",
    [
        "trainer.errors.ConfigError",
        "faults.errors.TargetError",
        "trainer.events.EventError",
        "chaos.errors.ScenarioError",
        "trainer.core.fragments.FragmentationError",
    ],
)
def test_every_package_error_is_a_message_and_exit_2(err: str, monkeypatch, capsys) -> None:
    import importlib

    import chaos.cli

    module, name = err.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)

    def fails(args):
        raise cls("what is wrong, and where")

    monkeypatch.setattr(chaos.cli, "cmd_list", fails)
    assert main(["list"]) == EXIT_ERROR
    assert capsys.readouterr().err == "error: what is wrong, and where\n"
