"""faults.in_pod on a real child process, seen through a /proc that holds only it (the host's other trainers,
a compose deployment's included, must never be signalled by a test)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults import in_pod, procfs


@pytest.fixture
def trainer(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)", "-m", "trainer.learner"]
    )
    for _ in range(500):  # until it has exec'd: before, its command line is this process's
        if "trainer.learner" in procfs.cmdline(child.pid):
            break
        time.sleep(0.01)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / str(child.pid)).symlink_to(f"/proc/{child.pid}")
    (proc / "self").symlink_to("/proc/self")  # not a pid: skipped
    yield child, proc
    child.kill()
    child.wait()


def _wait_state(pid: int, want: str) -> str:
    for _ in range(200):
        if (s := procfs.state(pid)) == want:
            return s
        time.sleep(0.01)
    return procfs.state(pid)


def test_it_finds_the_trainer_by_its_command_line_and_stops_and_continues_it(trainer) -> None:
    child, proc = trainer
    assert in_pod.trainer_pids(proc) == [child.pid]
    in_pod.signal_trainer(signal.SIGSTOP, proc)
    assert _wait_state(child.pid, "T") == "T"
    in_pod.signal_trainer(signal.SIGCONT, proc)
    assert _wait_state(child.pid, "S") in ("S", "R")


def test_slow_always_leaves_it_running(trainer) -> None:
    child, proc = trainer
    in_pod.slow(0.5, 0.1, 0.35, proc)
    assert procfs.state(child.pid) not in ("T", "")  # running: not stopped, not gone


def test_corrupt_writes_the_mode_and_kills_healthy_removes_it(trainer, tmp_path: Path) -> None:
    child, proc = trainer
    flag = tmp_path / "corrupt"
    in_pod.restart("nan", flag, proc)
    assert flag.read_text() == "nan" and child.wait(timeout=5) == -signal.SIGKILL
    with pytest.raises(SystemExit, match="no trainer"):  # it is dead now; the flag goes first all the same
        in_pod.restart(None, flag, proc)
    assert not flag.exists()


def test_no_trainer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no trainer process here"):
        in_pod.signal_trainer(signal.SIGCONT, tmp_path)


def test_a_learner_refuses_a_corrupt_file_naming_an_unknown_mode(tmp_path: Path, capsys) -> None:
    """The file faults.in_pod writes is read at the learner's start; a mode it does not know stops it, named."""
    from trainer.learner import main

    flag = tmp_path / "corrupt"
    flag.write_text("bitflip\n")
    code = main(
        ["--id", "learner-0", "--syncer", "127.0.0.1:1", "--run-dir", str(tmp_path), "--corrupt-file", str(flag)]
    )
    assert code == 2 and f"{flag} names corrupt mode 'bitflip'; it must be one of" in capsys.readouterr().err
