"""The controller's teardown check retries a stalled Toxiproxy API instead of reporting a leak."""

from __future__ import annotations

from types import SimpleNamespace

from chaos.controller import _Execution
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
    ex.toxi = toxi
    ex.backend = SimpleNamespace(tag="run-a")
    return ex


def test_a_transient_stall_is_retried() -> None:
    toxi = _FlakyToxiproxy(failures=2)
    assert _execution(toxi)._proxies_left(pause_s=0.0) == ["run-a-learner-0"]
    assert toxi.calls == 3


def test_a_persistent_failure_is_reported_as_unknown_not_as_clean() -> None:
    left = _execution(_FlakyToxiproxy(failures=99))._proxies_left(attempts=3, pause_s=0.0)
    assert len(left) == 1 and "could not list proxies after 3 attempts" in left[0]
