"""The suite's own CPU-load generator: hogs really burn CPU, and always stop (even if their parent is killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from benchmarks.load import CpuLoad
from faults import procfs
from tests.support import wait_until

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_hogs_burn_cpu_and_stop_on_exit():
    with CpuLoad(seed=3, hogs=2) as load:
        assert load.running() == 2
        pids = [p.pid for p in load.procs]
        wait_until(lambda: all(procfs.cpu_seconds(p) > 0.2 for p in pids), 30, "each hog to use 0.2 s of CPU")
    assert load.running() == 0
    assert not any(procfs.alive(p) for p in pids)


def test_one_hog_per_core_by_default():
    with CpuLoad() as load:
        assert len(load.procs) == (os.cpu_count() or 1)


def test_hogs_die_with_a_killed_parent():
    code = (
        "import sys, time; from benchmarks.load import CpuLoad; load = CpuLoad(hogs=2).start(); "
        "print(*[p.pid for p in load.procs], flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.send_signal(signal.SIGKILL)  # no cleanup code runs: only PR_SET_PDEATHSIG can stop the hogs
    parent.wait(10)
    wait_until(lambda: not any(procfs.alive(p) for p in pids), 10, "the hogs to die with their parent")
