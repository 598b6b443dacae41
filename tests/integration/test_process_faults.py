"""Process faults on real child processes: each fault has its real effect, and heal fully undoes it.

The cluster here is test plumbing only: its units ("syncer", "learner-0",
"learner-1") are real ``python -c`` children, each in its own session like the
real backend's, appending ``tick <n> <pid> corrupt=<CORRUPT>`` to its own file
every ~10 ms and writing ``bye <pid>`` then exiting 0 on SIGTERM. Progress is
measured as lines written by one pid in a window of time; "stopped" is read
from ``/proc/<pid>/stat`` (:func:`faults.procfs.state`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from faults import procfs
from faults.base import SYNCER, Cluster, Fault
from faults.errors import FaultError, TargetError
from faults.process import Corrupt, GracefulStop, Kill, Pause, Slow, SyncerCrash
from tests.support import FakeCluster

pytestmark = pytest.mark.integration

LEARNERS = ["learner-0", "learner-1"]
UNITS = [SYNCER, *LEARNERS]
T = TypeVar("T")

CHILD = r"""
import os, signal, sys, time
pid = os.getpid()
corrupt = os.environ.get("CORRUPT", "")
out = open(sys.argv[1], "a", buffering=1)

def bye(signum, frame):
    out.write(f"bye {pid}\n")
    out.flush()
    sys.exit(0)

signal.signal(signal.SIGTERM, bye)
n = 0
while True:
    n += 1
    out.write(f"tick {n} {pid} corrupt={corrupt}\n")
    time.sleep(0.01)
"""


def wait_for(pred: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.02) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class ProcCluster(FakeCluster):
    """A :class:`faults.base.Cluster` of real child processes (no training, just a heartbeat file each): the tests'
    :class:`~tests.support.FakeCluster`, whose network side fails any test that uses it, with real processes."""

    def __init__(self, root: Path) -> None:
        super().__init__(list(LEARNERS), proxies={lid: f"test-{lid}" for lid in LEARNERS})
        self.root = root
        self.procs: dict[str, subprocess.Popen] = {}
        self.spawned: list[tuple[str, subprocess.Popen]] = []
        self._dying: set[int] = set()  # pids sent SIGKILL / SIGTERM

    # ---- faults.base.Cluster: the processes (learners, proxy and toxiproxy: FakeCluster's) ----------------
    def alive(self, unit: str) -> bool:
        self._known(unit)
        p = self.procs.get(unit)
        return p is not None and p.poll() is None

    def signal(self, unit: str, sig: int) -> bool:
        self._known(unit)
        p = self.procs.get(unit)
        if p is None or p.poll() is not None:
            return False
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return False
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self._dying.add(p.pid)
        return True

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        self._known(unit)
        old = self.procs.get(unit)
        if old is not None and old.poll() is None:
            if old.pid in self._dying:  # killed, not yet reaped: wait for it, as the real backend's _reap does
                try:
                    old.wait(5.0)
                except subprocess.TimeoutExpired:
                    pass
            if old.poll() is None:
                raise RuntimeError(f"{unit} (pid {old.pid}) is still running; refusing to start another")
        env = dict(os.environ)
        env["CORRUPT"] = corrupt or ""
        with open(self.root / f"{unit}.err", "ab") as err:
            p = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(self.out(unit))],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        self.procs[unit] = p
        self.spawned.append((unit, p))

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        self._known(unit)
        if not self.alive(unit):
            return
        self.signal(unit, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        self.signal(unit, signal.SIGTERM)
        p = self.procs[unit]
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(unit, signal.SIGKILL)
            p.wait(5.0)

    # ---- test helpers ------------------------------------------------------
    def _known(self, unit: str) -> None:
        # Not a TargetError on purpose: the faults must reject unknown targets before calling the cluster.
        assert unit in UNITS, f"the cluster was asked about unknown unit {unit!r}"

    def out(self, unit: str) -> Path:
        return self.root / f"{unit}.out"

    def proc(self, unit: str) -> subprocess.Popen:
        return self.procs[unit]

    def pid(self, unit: str) -> int:
        return self.procs[unit].pid

    def spawn_count(self, unit: str) -> int:
        return sum(1 for u, _ in self.spawned if u == unit)

    def lines(self, unit: str) -> list[list[str]]:
        """Complete lines of the unit's file, split into fields (a partly written last line is left out)."""
        try:
            text = self.out(unit).read_text()
        except FileNotFoundError:
            return []
        return [ln.split(" ") for ln in text.split("\n")[:-1]]

    def ticks(self, unit: str, pid: int) -> list[list[str]]:
        return [f for f in self.lines(unit) if f[0] == "tick" and f[2] == str(pid)]

    def said_bye(self, unit: str, pid: int) -> bool:
        return ["bye", str(pid)] in self.lines(unit)

    def wait_running(self, unit: str, timeout_s: float = 10.0) -> int:
        """Wait until the unit's current process has written a few lines; returns its pid."""
        pid = self.pid(unit)
        wait_for(lambda: len(self.ticks(unit, pid)) >= 3, timeout_s, f"{unit} (pid {pid}) to make progress")
        return pid

    def kill_all(self) -> list[str]:
        """SIGKILL every process ever spawned here; returns those still running afterwards."""
        for _, p in self.spawned:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for _, p in self.spawned:
            try:
                p.wait(10.0)
            except subprocess.TimeoutExpired:
                pass
        return [f"{u} (pid {p.pid})" for u, p in self.spawned if p.poll() is None]


def progress(cluster: ProcCluster, window_s: float, *units: str) -> dict[str, int]:
    """Lines written by each unit's current process during one common window of ``window_s``."""
    pids = {u: cluster.pid(u) for u in units}
    before = {u: len(cluster.ticks(u, pids[u])) for u in units}
    time.sleep(window_s)
    return {u: len(cluster.ticks(u, pids[u])) - before[u] for u in units}


def assert_dead_by_sigkill(cluster: ProcCluster, unit: str, pid: int) -> None:
    p = next(p for u, p in cluster.spawned if u == unit and p.pid == pid)
    wait_for(lambda: p.poll() is not None, 5.0, f"{unit} (pid {pid}) to die")
    assert p.returncode == -signal.SIGKILL, f"{unit} exited with {p.returncode}, not by SIGKILL"
    assert not cluster.said_bye(unit, pid), "a SIGKILLed process must not get to say goodbye"


def assert_restarted(cluster: ProcCluster, unit: str, old_pid: int) -> int:
    assert cluster.alive(unit)
    new = cluster.pid(unit)
    assert new != old_pid, f"{unit} was not restarted (still pid {old_pid})"
    cluster.wait_running(unit)
    return new


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path)
    try:
        for u in UNITS:
            c.start(u)
        for u in UNITS:
            c.wait_running(u)
        yield c
    finally:
        left = c.kill_all()
    assert not left, f"processes left running after the test: {left}"


def test_the_test_cluster_is_a_cluster_and_refuses_a_second_process(cluster: ProcCluster) -> None:
    assert isinstance(cluster, Cluster)
    with pytest.raises(RuntimeError, match="still running"):
        cluster.start("learner-0")
    assert cluster.spawn_count("learner-0") == 1


# ---- Kill ------------------------------------------------------------------------


@pytest.mark.covers("kill")
def test_kill_sigkills_the_unit_and_heal_restarts_it_once(cluster: ProcCluster) -> None:
    old, other = cluster.pid("learner-0"), cluster.pid("learner-1")
    kill = Kill(fault_id="k1", targets=("learner-0",))

    assert kill.inject(cluster) == {"killed": ["learner-0"]}
    assert_dead_by_sigkill(cluster, "learner-0", old)
    assert not cluster.alive("learner-0")
    assert kill.inject(cluster) == {"killed": []}, "killing a dead unit again must be a no-op"

    # Only the target was hit.
    assert cluster.alive("learner-1") and cluster.pid("learner-1") == other
    assert cluster.alive(SYNCER)

    assert kill.heal(cluster) == {"restarted": ["learner-0"]}
    new = assert_restarted(cluster, "learner-0", old)
    assert kill.heal(cluster) == {"restarted": []}, "a second heal must not start a second process"
    assert cluster.pid("learner-0") == new and cluster.spawn_count("learner-0") == 2
    assert progress(cluster, 0.3, "learner-0")["learner-0"] > 0


def test_kill_without_restart_leaves_the_unit_dead(cluster: ProcCluster) -> None:
    old = cluster.pid("learner-1")
    kill = Kill(fault_id="k2", targets=("learner-1",), restart=False)
    assert kill.inject(cluster) == {"killed": ["learner-1"]}
    assert_dead_by_sigkill(cluster, "learner-1", old)
    assert kill.heal(cluster) == {"restarted": []}
    assert kill.heal(cluster) == {"restarted": []}
    assert not cluster.alive("learner-1") and cluster.spawn_count("learner-1") == 1
    assert "never restarted" in kill.describe()


@pytest.mark.parametrize(
    "make",
    [lambda: Kill(fault_id="k0", targets=("learner-0",)), lambda: SyncerCrash(fault_id="c0")],
    ids=["kill", "syncer_crash"],
)
def test_heal_right_after_inject_restarts_the_killed_unit(cluster: ProcCluster, make: Callable) -> None:
    """A scenario may give ``duration: 0``: the controller then heals in the same loop pass as the inject.

    SIGKILL is delivered asynchronously, so right after ``inject`` the process is often not yet
    reaped and ``alive()`` still says True; heal must still leave the unit running (a new process),
    not skip the restart and leave the unit dead for the rest of the run.
    """
    for round_ in range(5):  # the race shows up in most rounds on a loaded machine
        fault = make()
        unit = fault.targets[0]
        old = cluster.pid(unit)
        assert fault.inject(cluster) == {"killed": [unit]}
        healed = fault.heal(cluster)
        assert healed == {"restarted": [unit]}, (
            f"round {round_}: heal right after inject did not restart {unit} (evidence {healed}); "
            f"alive={cluster.alive(unit)}, old pid {old} returncode {cluster.proc(unit).returncode}"
        )
        assert_restarted(cluster, unit, old)


# ---- GracefulStop ------------------------------------------------------------------


@pytest.mark.covers("stop")
def test_graceful_stop_exits_zero_after_goodbye_and_heal_restarts(cluster: ProcCluster) -> None:
    old = cluster.pid("learner-1")
    stop = GracefulStop(fault_id="g1", targets=("learner-1",), timeout_s=5.0)

    assert stop.inject(cluster) == {"stopped": ["learner-1"]}
    assert not cluster.alive("learner-1"), "inject returns once the unit has left"
    assert cluster.proc("learner-1").returncode == 0
    assert cluster.said_bye("learner-1", old)
    assert stop.inject(cluster) == {"stopped": []}

    assert stop.heal(cluster) == {"restarted": ["learner-1"]}
    new = assert_restarted(cluster, "learner-1", old)
    assert stop.heal(cluster) == {"restarted": []}
    assert cluster.pid("learner-1") == new and cluster.spawn_count("learner-1") == 2


def test_graceful_stop_of_a_paused_unit_still_exits_gracefully(cluster: ProcCluster) -> None:
    pid = cluster.pid("learner-0")
    pause = Pause(fault_id="p0", targets=("learner-0",))
    pause.inject(cluster)
    wait_for(lambda: procfs.state(pid) == "T", 2.0, "learner-0 to be stopped")
    assert GracefulStop(fault_id="g0", targets=("learner-0",), timeout_s=5.0).inject(cluster) == {
        "stopped": ["learner-0"]
    }
    assert cluster.proc("learner-0").returncode == 0 and cluster.said_bye("learner-0", pid)
    assert pause.heal(cluster) == {"resumed": []}


# ---- Pause -------------------------------------------------------------------------


@pytest.mark.covers("pause")
def test_pause_stops_progress_and_heal_resumes_it(cluster: ProcCluster) -> None:
    pid = cluster.pid("learner-1")
    pause = Pause(fault_id="p1", targets=("learner-1",))

    assert pause.inject(cluster) == {"paused": ["learner-1"]}
    wait_for(lambda: procfs.state(pid) == "T", 2.0, "learner-1 to be stopped")
    made = progress(cluster, 0.5, "learner-1", "learner-0")
    assert made["learner-1"] == 0, f"a paused process wrote {made['learner-1']} lines"
    assert made["learner-0"] > 0, "the other learner keeps going"
    assert cluster.alive("learner-1") and cluster.pid("learner-1") == pid
    assert pause.inject(cluster) == {"paused": ["learner-1"]}  # again: still one pause, no error

    assert pause.heal(cluster) == {"resumed": ["learner-1"]}
    assert progress(cluster, 0.3, "learner-1")["learner-1"] > 0
    assert procfs.state(pid) != "T"
    assert pause.heal(cluster) == {"resumed": ["learner-1"]}  # twice: harmless
    assert progress(cluster, 0.3, "learner-1")["learner-1"] > 0
    assert cluster.pid("learner-1") == pid and cluster.spawn_count("learner-1") == 1


def test_pause_of_a_dead_unit_pauses_nothing(cluster: ProcCluster) -> None:
    pid = cluster.pid("learner-0")
    cluster.signal("learner-0", signal.SIGKILL)
    assert_dead_by_sigkill(cluster, "learner-0", pid)
    pause = Pause(fault_id="p2", targets=("learner-0",))
    assert pause.inject(cluster) == {"paused": []}
    assert pause.heal(cluster) == {"resumed": []}
    assert not cluster.alive("learner-0") and cluster.spawn_count("learner-0") == 1


# ---- Slow --------------------------------------------------------------------------


@pytest.mark.covers("slow")
def test_slow_lowers_the_rate_and_heal_restores_it(cluster: ProcCluster) -> None:
    # learner-1 is the control, measured in the same windows, so background load affects both alike.
    before = progress(cluster, 0.5, "learner-0", "learner-1")
    assert before["learner-0"] > 0 and before["learner-1"] > 0
    pid = cluster.pid("learner-0")
    slow = Slow(fault_id="s1", targets=("learner-0",), fraction=0.3, period_s=0.1)
    try:
        assert slow.inject(cluster) == {"slowed": ["learner-0"], "fraction": 0.3}
        assert slow.inject(cluster).get("already") is True
        time.sleep(0.05)
        during = progress(cluster, 0.8, "learner-0", "learner-1")
    finally:
        healed = slow.heal(cluster)
    assert healed == {"resumed": ["learner-0"]}
    assert during["learner-0"] < 0.7 * during["learner-1"], f"not slowed: before {before}, during {during}"
    assert during["learner-0"] > 0, "slow is not a pause: some progress is made"
    assert cluster.alive("learner-0") and cluster.pid("learner-0") == pid

    for _ in range(5):  # never left stopped after heal
        assert procfs.state(pid) not in ("T", ""), f"learner-0 state {procfs.state(pid)!r} after heal"
        time.sleep(0.04)
    after = progress(cluster, 0.8, "learner-0", "learner-1")
    assert after["learner-0"] > 0.7 * after["learner-1"], f"rate not restored: before {before}, after {after}"


def test_slow_heal_without_inject_is_harmless(cluster: ProcCluster) -> None:
    pid = cluster.pid("learner-1")
    slow = Slow(fault_id="s2", targets=("learner-1",), fraction=0.5)
    assert slow.heal(cluster) == {"resumed": ["learner-1"]}
    assert slow.heal(cluster) == {"resumed": ["learner-1"]}
    assert procfs.state(pid) not in ("T", "")
    assert progress(cluster, 0.3, "learner-1")["learner-1"] > 0
    assert cluster.pid("learner-1") == pid


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.5, 1.5])
def test_slow_rejects_a_fraction_outside_0_1(fraction: float) -> None:
    with pytest.raises(FaultError, match="'fraction'"):
        Slow(fault_id="s3", targets=("learner-0",), fraction=fraction)


@pytest.mark.parametrize("period_s", [0.0, 0.001, 11.0])
def test_slow_rejects_a_period_out_of_range(period_s: float) -> None:
    with pytest.raises(FaultError, match="'period_s'"):
        Slow(fault_id="s4", targets=("learner-0",), period_s=period_s)


# ---- SyncerCrash -------------------------------------------------------------------


@pytest.mark.covers("syncer_crash")
def test_syncer_crash_kills_the_syncer_and_heal_restarts_it(cluster: ProcCluster) -> None:
    old = cluster.pid(SYNCER)
    learners = {lid: cluster.pid(lid) for lid in LEARNERS}
    crash = SyncerCrash(fault_id="c1")

    assert crash.inject(cluster) == {"killed": [SYNCER]}
    assert_dead_by_sigkill(cluster, SYNCER, old)
    assert crash.inject(cluster) == {"killed": []}
    assert {lid: cluster.pid(lid) for lid in LEARNERS} == learners
    assert all(cluster.alive(lid) for lid in LEARNERS)

    assert crash.heal(cluster) == {"restarted": [SYNCER]}
    new = assert_restarted(cluster, SYNCER, old)
    assert crash.heal(cluster) == {"restarted": []}
    assert cluster.pid(SYNCER) == new and cluster.spawn_count(SYNCER) == 2


def test_syncer_crash_heal_on_a_live_syncer_does_nothing(cluster: ProcCluster) -> None:
    pid = cluster.pid(SYNCER)
    assert SyncerCrash(fault_id="c2").heal(cluster) == {"restarted": []}
    assert cluster.pid(SYNCER) == pid and cluster.spawn_count(SYNCER) == 1


@pytest.mark.parametrize("targets", [("learner-0",), (SYNCER, "learner-0"), ()])
def test_syncer_crash_targets_only_the_syncer(targets: tuple[str, ...]) -> None:
    with pytest.raises(FaultError, match="'targets'"):
        SyncerCrash(fault_id="c3", targets=targets)


# ---- Corrupt -----------------------------------------------------------------------


@pytest.mark.covers("corrupt")
def test_corrupt_restarts_the_learner_corrupt_and_heal_restarts_it_healthy(cluster: ProcCluster) -> None:
    first = cluster.pid("learner-1")
    corrupt = Corrupt(fault_id="x1", targets=("learner-1",), mode="nan")

    assert corrupt.heal(cluster) == {"restarted_healthy": []}, "heal before inject must leave it alone"
    assert cluster.pid("learner-1") == first and cluster.spawn_count("learner-1") == 1

    assert corrupt.inject(cluster) == {"corrupt": ["learner-1"], "mode": "nan"}
    assert_dead_by_sigkill(cluster, "learner-1", first)
    bad = assert_restarted(cluster, "learner-1", first)
    assert {f[3] for f in cluster.ticks("learner-1", bad)} == {"corrupt=nan"}
    assert {f[3] for f in cluster.ticks("learner-1", first)} == {"corrupt="}
    assert corrupt.inject(cluster) == {"corrupt": ["learner-1"], "mode": "nan", "already": True}
    assert cluster.pid("learner-1") == bad and cluster.spawn_count("learner-1") == 2, "inject twice is one restart"
    assert (
        cluster.pid("learner-0") != bad
        and cluster.ticks("learner-0", cluster.pid("learner-0"))[-1][3] == "corrupt="
    )

    assert corrupt.heal(cluster) == {"restarted_healthy": ["learner-1"]}
    assert_dead_by_sigkill(cluster, "learner-1", bad)
    healthy = assert_restarted(cluster, "learner-1", bad)
    assert {f[3] for f in cluster.ticks("learner-1", healthy)} == {"corrupt="}
    assert corrupt.heal(cluster) == {"restarted_healthy": []}
    assert cluster.pid("learner-1") == healthy and cluster.spawn_count("learner-1") == 3
    assert progress(cluster, 0.3, "learner-1")["learner-1"] > 0


def test_corrupt_rejects_an_unknown_mode() -> None:
    with pytest.raises(FaultError, match="'mode'"):
        Corrupt(fault_id="x2", targets=("learner-0",), mode="bogus")


@pytest.mark.parametrize("targets", [(SYNCER,), ("learner-0", SYNCER)])
def test_corrupt_rejects_the_syncer(targets: tuple[str, ...]) -> None:
    with pytest.raises(FaultError, match="syncer"):
        Corrupt(fault_id="x3", targets=targets)


# ---- targets and descriptions -----------------------------------------------------------

TARGETED: dict[str, Callable[[tuple[str, ...]], Fault]] = {
    "kill": lambda t: Kill(fault_id="t", targets=t),
    "stop": lambda t: GracefulStop(fault_id="t", targets=t, timeout_s=5.0),
    "pause": lambda t: Pause(fault_id="t", targets=t),
    "slow": lambda t: Slow(fault_id="t", targets=t, fraction=0.5),
    "corrupt": lambda t: Corrupt(fault_id="t", targets=t),
}


@pytest.mark.parametrize("kind", sorted(TARGETED))
def test_unknown_target_is_rejected_before_anything_is_done(cluster: ProcCluster, kind: str) -> None:
    pids = {u: cluster.pid(u) for u in UNITS}
    fault = TARGETED[kind](("learner-0", "learner-9"))
    with pytest.raises(TargetError) as err:
        fault.inject(cluster)
    msg = str(err.value)
    assert "learner-9" in msg
    assert all(lid in msg for lid in LEARNERS), f"the known units are not listed: {msg}"
    if kind != "corrupt":
        assert SYNCER in msg
    time.sleep(0.05)
    assert {u: cluster.pid(u) for u in UNITS} == pids and all(cluster.alive(u) for u in UNITS)
    assert procfs.state(pids["learner-0"]) != "T", "learner-0 was touched although the fault was rejected"


@pytest.mark.parametrize("kind", sorted(TARGETED))
def test_empty_targets_are_rejected(kind: str) -> None:
    with pytest.raises(FaultError, match="'targets'"):
        TARGETED[kind](())


@pytest.mark.parametrize("kind", sorted(TARGETED))
def test_describe_names_the_target(kind: str) -> None:
    text = TARGETED[kind](("learner-1",)).describe()
    assert isinstance(text, str) and text.strip() and "learner-1" in text


def test_syncer_crash_describe_names_the_syncer() -> None:
    text = SyncerCrash(fault_id="c4").describe()
    assert isinstance(text, str) and SYNCER in text
