"""trainer.lifeline: children die with their parent, and no Python runs between fork and exec.

The regression this guards: a syncer restarted by the chaos controller (a process with live gRPC threads)
aborted in the forked child while ``preexec_fn`` ran ("epoll_wait error: Bad file descriptor", "Fatal Python
error: Aborted", exit code -6): CI under load, syncer-crash. Reproduced before the fix by a scenario of 14
syncer crashes under ``under-load``; the abort's traceback was the controller's own stack inside
``subprocess._execute_child``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.load import CpuLoad
from faults.toxiproxy_server import ToxiproxyServer
from trainer.config import RunConfig
from trainer.launch import LocalCluster
from trainer.lifeline import guarded

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"),
]


def test_guarded_runs_the_program_with_its_arguments() -> None:
    out = subprocess.run(
        guarded([sys.executable, "-c", "import sys; print(sys.argv[1:])", "a", "b c"], os.getpid()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['a', 'b c']"


def test_guarded_child_of_another_parent_exits_at_once() -> None:
    """The check after prctl: a parent that is not the one expected (here: a wrong pid) means it already died."""
    out = subprocess.run(
        guarded([sys.executable, "-c", "print('ran')"], os.getpid() + 10_000_000),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "ran" not in out.stdout


def test_guarded_sets_the_death_signal_and_nice() -> None:
    probe = (
        "import ctypes, os; v = ctypes.c_int(); "
        "ctypes.CDLL('libc.so.6').prctl(2, ctypes.byref(v)); "  # PR_GET_PDEATHSIG
        "print(v.value, os.nice(0))"
    )
    base = os.nice(0)
    out = subprocess.run(
        guarded([sys.executable, "-c", probe], os.getpid(), nice=3), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    sig, nice = map(int, out.stdout.split())
    assert sig == 9
    assert nice == min(base + 3, 19)


def test_guarded_refuses_a_missing_program() -> None:
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        guarded(["no-such-program-x"], os.getpid())


class _Recorded(Exception):
    pass


def test_no_helper_runs_python_between_fork_and_exec(tmp_path, monkeypatch) -> None:
    """Every place that starts a helper goes through guarded() and passes no preexec_fn."""
    seen: list[tuple[list[str], dict]] = []

    def record(args, **kwargs):  # noqa: ANN001, ANN003
        seen.append((list(args), kwargs))
        raise _Recorded

    monkeypatch.setattr(subprocess, "Popen", record)
    cluster = LocalCluster(RunConfig(), tmp_path / "run")
    with pytest.raises(_Recorded):
        cluster.start_learner("learner-0", address="127.0.0.1:1")
    with pytest.raises(_Recorded):
        CpuLoad(hogs=1).start()
    with pytest.raises(_Recorded):
        ToxiproxyServer(binary=sys.executable, log_path=tmp_path / "tp.log").start()  # never runs: recorded
    assert len(seen) == 3
    for args, kwargs in seen:
        assert kwargs.get("preexec_fn") is None, args
        assert args[:3] == [sys.executable, "-S", "-c"], args
