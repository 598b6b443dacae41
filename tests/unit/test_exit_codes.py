"""Exit codes a script can branch on: 0 pass, 1 a check failed, 2 the run could not be done, 3 undecided."""

from __future__ import annotations

import pytest

from chaos.checkers import Verdict, overall
from chaos.cli import main
from chaos.exit_codes import ExitCode


def _v(status: str) -> Verdict:
    return Verdict(f"check-{status}", status, "")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "statuses,expected",
    [
        ((), ("pass", 0)),
        (("pass", "pass"), ("pass", 0)),
        (
            ("pass", "indeterminate"),
            ("indeterminate", 3),
        ),  # undecided is not a failure: a script can tell them apart
        (("indeterminate", "fail", "pass"), ("fail", 1)),  # a failure wins over an undecided check
    ],
)
def test_overall_status_and_exit_code(statuses, expected):
    assert overall([_v(s) for s in statuses]) == expected


def test_the_codes_are_distinct_and_an_unknown_scenario_is_an_error():
    assert sorted(int(c) for c in ExitCode) == [0, 1, 2, 3]
    assert main(["run", "no-such-scenario"]) == ExitCode.ERROR
