"""The controller's scheduling loop: faults start and heal when the plan says, not on a poll's phase, and a Status
call that hangs (a paused or partitioned syncer) never holds one back.

The loop runs for real (threads, the wall clock) against a stand-in backend whose Status blocks on demand; what is
asserted is order and a wide margin, not a latency: the plan's step due at 0.05 s must come while a Status call
is still blocked, and long before a 30 s poll would have let it. Negative controls: the loop before (a fixed poll;
``wake_at_plan=False``) misses the first; the status call made on the loop's own thread (planted) misses the second.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos import controller as ctl
from chaos.fault_plan import Planned, plan
from chaos.history import Recorder
from chaos.interpreter import PlanInterpreter
from chaos.scenario import parse_scenario
from chaos.watchdog import Progress

FAR = 30.0  # seconds: a poll this long would hold every step back past the test's patience
PATIENCE = 10.0


class _Backend:
    """The syncer is up until the test says it finished; its Status blocks while ``hang`` is set."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.released = threading.Event()
        self.finished = threading.Event()
        self.calls = 0

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        yield self

    def status(self) -> Any:
        self.calls += 1
        if self.hang.is_set():
            self.released.wait(PATIENCE)
        return SimpleNamespace(merges=1, tokens=0, token_budget=1, eval_loss=0.0, finished=False)

    def alive(self, unit: str) -> bool:
        return not self.finished.is_set()

    def exit_code(self, unit: str) -> int:
        return 0

    def learners(self) -> list[str]:
        return []


def _planned(at: float) -> list[Planned]:
    return plan(
        parse_scenario(
            {
                "name": "t",
                "cluster": {"algorithm": {"num_learners": 3}},
                "schedule": [{"fault": "pause", "targets": ["learner-0"], "at": at, "duration": 60}],
            }
        )
    )


def _execution(
    tmp_path: Path, backend: _Backend, at: float, **opts: Any
) -> tuple[ctl._Execution, threading.Event]:
    """An execution whose steady phase began now, its plan one fault ``at`` seconds in; the event is set when the
    loop injects it (the injection releases a hung Status and ends the run)."""
    ex = ctl._Execution.__new__(ctl._Execution)  # only what _loop, _watch and _end read
    ex.backend = backend  # type: ignore[assignment]
    ex.opts = ctl.RunOptions(out_dir=tmp_path, progress=None, **opts)
    ex.scenario = SimpleNamespace(timeout_s=4 * PATIENCE)  # type: ignore[assignment]
    ex.recorder = Recorder(tmp_path / "controller.jsonl")
    ex.progress, ex.merges, ex.status_line, ex.faults = Progress(), 0, "", {}
    ex.steady_at = time.time()
    ex.interp = PlanInterpreter(_planned(at), origin=ex.steady_at)
    ex._stall = lambda: None  # type: ignore[method-assign]  # the watchdog has its own tests
    ex.say = lambda msg: None  # type: ignore[method-assign]
    injected = threading.Event()

    def inject(p: Planned, rel: float) -> None:
        injected.set()
        backend.released.set()
        backend.finished.set()

    ex.inject = inject  # type: ignore[method-assign]
    ex.heal = lambda step: None  # type: ignore[method-assign]
    return ex, injected


def _run(ex: ctl._Execution) -> threading.Thread:
    t = threading.Thread(target=ex._loop, daemon=True)
    t.start()
    return t


def test_a_fault_starts_at_its_time_not_on_the_polls_phase(tmp_path: Path) -> None:
    ex, injected = _execution(tmp_path, _Backend(), at=0.05, poll_s=FAR)
    loop = _run(ex)
    assert injected.wait(PATIENCE), f"a fault due at 0.05 s was not injected within {PATIENCE} s (poll {FAR} s)"
    loop.join(PATIENCE)
    assert not loop.is_alive()


def test_a_fault_starts_on_time_while_a_status_call_hangs(tmp_path: Path) -> None:
    backend = _Backend()
    backend.hang.set()
    ex, injected = _execution(tmp_path, backend, at=0.05)
    loop = _run(ex)
    assert injected.wait(PATIENCE / 2), "a hung Status call held the fault back"
    loop.join(PATIENCE)
    assert not loop.is_alive() and backend.calls >= 1


def test_negative_control_a_fixed_poll_holds_the_fault_back(tmp_path: Path) -> None:
    """The loop before: it sleeps its whole poll (3 s here) whatever the plan says."""
    ex, injected = _execution(tmp_path, _Backend(), at=0.05, poll_s=3.0, wake_at_plan=False)
    loop = _run(ex)
    assert not injected.wait(1.0), "the fixed poll should have held the fault until its next wake"
    assert injected.wait(PATIENCE)
    loop.join(PATIENCE)
    assert not loop.is_alive()


def test_negative_control_status_on_the_loops_thread_holds_the_fault_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted: the loop polls Status itself before its steps (as it did before the status thread)."""
    backend = _Backend()
    backend.hang.set()
    ex, injected = _execution(tmp_path, backend, at=0.05)
    due = ex.interp.due

    def polled_first(now: float, merges: int, result_fixed: bool = False) -> list[Any]:
        backend.status()
        return due(time.time(), merges, result_fixed)

    monkeypatch.setattr(ex.interp, "due", polled_first)
    loop = _run(ex)
    assert not injected.wait(1.0), "with Status on the loop's thread, a hung call should hold the fault back"
    backend.released.set()
    assert injected.wait(PATIENCE)
    loop.join(PATIENCE)
