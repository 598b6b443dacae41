"""A child process that dies with its parent, started without running Python between fork and exec.

Every helper this project starts (a syncer, a learner, a toxiproxy-server, a CPU hog) must die when the
process that started it dies, even by SIGKILL: Linux's PR_SET_PDEATHSIG does that. It has to be set in the
child, and the child must then check that its parent is still the one it expected (a parent killed between
the fork and the prctl never sends the signal).

That used to run as ``subprocess.Popen(preexec_fn=...)``: Python code in the forked child of a process whose
gRPC threads were running. gRPC's fork handlers then abort the child now and then ("epoll_wait error: Bad
file descriptor", "Fatal Python error: Aborted", exit code -6 — a syncer restart failed so in CI under
load). So the child runs a tiny interpreter instead (``python -S``: no site, quick), which sets the death
signal, checks its parent, lowers its priority if asked, and execs the real program; the death signal
survives exec. Without ``preexec_fn``, :mod:`subprocess` starts the child with vfork and exec at once.

Example:
    >>> cmd = guarded(["true"], parent_pid=1234, nice=5)
    >>> cmd[4:]
    ['1234', '5', 'true']
"""

from __future__ import annotations

import shutil
import sys

# Run as ``python -S -c _SHIM PARENT_PID NICE PROGRAM ARGS...``. Exit codes: 1 the parent was already gone,
# 127 PROGRAM could not be executed (as a shell says).
_SHIM = """\
import os, signal, sys
parent, nice, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if nice:
    os.nice(nice)
try:
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass  # not Linux: the parent's own cleanup still stops its children on every normal exit path
else:
    if os.getppid() != parent:
        os._exit(1)
try:
    os.execvp(argv[0], argv)
except OSError as err:
    print(f"cannot run {argv[0]!r}: {err}", file=sys.stderr)
    os._exit(127)
"""


def guarded(argv: list[str], parent_pid: int, nice: int = 0) -> list[str]:
    """``argv`` wrapped so that it gets SIGKILL when ``parent_pid`` (the caller, which must be its parent) dies.

    SIGKILL, not SIGTERM: a child paused by a fault (SIGSTOP) would never handle a SIGTERM. Linux ties the
    signal to the *thread* that starts the child: start it from a thread that outlives it. Raises
    FileNotFoundError, as Popen would, when ``argv[0]`` is not an executable program.
    """
    if not argv:
        raise ValueError("guarded() needs a program to run")
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(f"no executable program {argv[0]!r}")
    return [sys.executable, "-S", "-c", _SHIM, str(parent_pid), str(nice), *argv]
