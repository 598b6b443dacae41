"""What Linux's /proc says about a process: its state letter, command line and CPU time, and which processes run a
given command line. Stdlib only: :mod:`faults.in_pod` uses it inside a trainer's container (to find the trainer),
the fault-latency benchmark to sample a unit's state, and the tests to find a run's processes and check that none
is left behind (instead of ``pgrep`` or their own parsing of /proc).

Every function takes the /proc to read (``proc``; a directory of links to a few real ``/proc/<pid>`` entries in
the tests), and none raises for a process that is gone or exits while it is read.

Example:
    >>> import os
    >>> alive(os.getpid()), state(os.getpid()) in ("R", "S"), "python" in " ".join(cmdline(os.getpid()))
    (True, True, True)
    >>> state(2**22 + 1), alive(2**22 + 1), cmdline(2**22 + 1)  # above pid_max: no such process
    ('', False, [])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
DEAD = ("Z", "X", "x")  # a zombie (exited, not yet reaped) or dying: not running, though its pid still exists


def state_letter(stat: str) -> str:
    """The one-letter state in the text of ``/proc/<pid>/stat`` ('R', 'S', 'D', 'T' stopped, 'Z' zombie, ...).

    It follows the last ``)``: the command name in parentheses may itself hold spaces or ``)``.

    Example:
        >>> state_letter("42 (python (x)) T 1 2"), state_letter("7 (a) b) S 1")
        ('T', 'S')
    """
    return fields_after_name(stat)[0]


def fields_after_name(stat: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat``'s text after the command name: the state first (field 3 of proc(5)).

    Example:
        >>> fields_after_name("42 (a b) S 1 2")
        ['S', '1', '2']
    """
    return stat.rsplit(")", 1)[-1].split()


def stat_text(pid: int, proc: Path = PROC) -> str | None:
    """The text of ``/proc/<pid>/stat``; None when there is no such process."""
    try:
        return (proc / str(pid) / "stat").read_text()
    except OSError:  # no such process, or it exited while we read
        return None


def state(pid: int, proc: Path = PROC) -> str:
    """``pid``'s one-letter state (:func:`state_letter`); '' when there is no such process."""
    stat = stat_text(pid, proc)
    return "" if stat is None else state_letter(stat)


def alive(pid: int, proc: Path = PROC) -> bool:
    """Whether ``pid`` is a process that has not exited: a zombie (exited, not yet reaped) is not alive."""
    return state(pid, proc) not in ("", *DEAD)


def parent(pid: int, proc: Path = PROC) -> int:
    """``pid``'s parent's pid (field 4 of ``/proc/<pid>/stat``); 0 when there is no such process.

    Example:
        >>> parent(os.getpid()) == os.getppid(), parent(2**22 + 1)
        (True, 0)
    """
    stat = stat_text(pid, proc)
    return 0 if stat is None else int(fields_after_name(stat)[1])


def cpu_seconds(pid: int, proc: Path = PROC) -> float:
    """CPU time ``pid`` has used (user + system), in seconds; 0.0 when there is no such process."""
    stat = stat_text(pid, proc)
    if stat is None:
        return 0.0
    fields = fields_after_name(stat)  # fields[0] is the state (field 3 of proc(5)): utime is 14, stime 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmdline(pid: int, proc: Path = PROC) -> list[str]:
    """``pid``'s argv; [] when there is no such process, or it has none (a zombie, a kernel thread)."""
    try:
        text = (proc / str(pid) / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return []
    return (text[:-1] if text.endswith("\0") else text).split("\0") if text else []


def find(match: Callable[[list[str]], bool], proc: Path = PROC) -> dict[int, list[str]]:
    """The live processes (:func:`alive`) other than this one whose argv ``match`` accepts: their argv, by pid."""
    found: dict[int, list[str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        argv = cmdline(pid, proc)
        if argv and match(argv) and alive(pid, proc):
            found[pid] = argv
    return found


def matching(text: str, proc: Path = PROC) -> list[int]:
    """What ``pgrep -f text`` prints: the live processes (not this one) whose command line, its arguments joined
    by spaces, contains ``text``."""
    return sorted(find(lambda argv: text in " ".join(argv), proc))
