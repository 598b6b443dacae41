"""The controller's teardown: its check retries a stalled Toxiproxy API instead of reporting a leak, and its record
keeps history.jsonl's layout."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from chaos.controller import _Execution
from chaos.history import History, Recorder, Teardown
from chaos.interpreter import PlanInterpreter
from faults.errors import FaultError


class _FlakyToxiproxy:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def proxies(self) -> dict[str, object]:
        self.calls += 1
        if self.calls <= self.failures:
            raise FaultError("GET /proxies: timed out")
        return {"run-a-learner-0": object(), "other-run-learner-0": object()}


def _execution(toxi: _FlakyToxiproxy) -> _Execution:
    ex = _Execution.__new__(_Execution)  # only the attributes _proxies_left reads
    ex.toxi = toxi  # type: ignore[assignment]  # a stand-in: proxies(), all _proxies_left calls
    ex.backend = SimpleNamespace(tag="run-a")
    return ex


def test_a_transient_stall_is_retried() -> None:
    toxi = _FlakyToxiproxy(failures=2)
    assert _execution(toxi)._proxies_left(pause_s=0.0) == ["run-a-learner-0"]
    assert toxi.calls == 3


def test_a_persistent_failure_is_reported_as_unknown_not_as_clean() -> None:
    left = _execution(_FlakyToxiproxy(failures=99))._proxies_left(attempts=3, pause_s=0.0)
    assert len(left) == 1 and "could not list proxies after 3 attempts" in left[0]


def test_the_teardown_record_keeps_its_layout_and_reads_back_typed(tmp_path: Path) -> None:
    ex = _execution(_FlakyToxiproxy(failures=0))
    ex.interp = PlanInterpreter([], origin=0.0)
    ex.backend = SimpleNamespace(
        tag="run-a",
        running_units=lambda: [],
        teardown=lambda: Teardown(exit_codes={"learner-0": -9, "syncer": 0}, problems=[]),
    )
    ex.recorder = Recorder(tmp_path / "controller.jsonl")
    ex.metrics_server = None  # the controller served no /metrics (RunOptions.metrics_port None)
    ex._teardown()
    (line,) = (tmp_path / "controller.jsonl").read_text().splitlines()
    assert json.loads(line)["detail"] == {
        "proxies_left": ["run-a-learner-0"],
        "processes_left": [],
        "healed_on_teardown": False,
        "exit_codes": {"learner-0": -9, "syncer": 0},
        "problems": [],
    }
    teardown = History.read(tmp_path).teardown()
    assert (
        teardown is not None
        and teardown.proxies_left == ["run-a-learner-0"]
        and teardown.exit_codes["syncer"] == 0
    )
