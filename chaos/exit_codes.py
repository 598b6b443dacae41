"""What a run's exit status means, so a script can branch on it (one home for every command and backend).

    0  every check passed
    1  a check failed
    2  the run could not be done (invalid input, a unit would not start, timeout, SIGINT/SIGTERM)
    3  no check failed, but at least one could not decide (the report says which, and why)

Example:
    >>> int(for_status("indeterminate")), int(for_status("pass"))
    (3, 0)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    PASS = 0
    FAIL = 1
    ERROR = 2
    INDETERMINATE = 3


def for_status(status: str) -> ExitCode:
    """The exit code of a run whose overall verdict is ``status`` ("pass", "fail" or "indeterminate")."""
    return {"pass": ExitCode.PASS, "fail": ExitCode.FAIL, "indeterminate": ExitCode.INDETERMINATE}[status]
