"""Runs sharing a baseline cache compute each baseline once: its key's lock excludes every other process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chaos.controller import _exclusive


def _try_lock(path: Path) -> subprocess.CompletedProcess:
    probe = f"import fcntl; fcntl.flock(open({str(path)!r}, 'w'), fcntl.LOCK_EX | fcntl.LOCK_NB)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)


def test_a_held_baseline_lock_excludes_another_process_until_released(tmp_path: Path) -> None:
    lock = tmp_path / "cache" / "66d31578633ba32b.lock"
    with _exclusive(lock):
        held = _try_lock(lock)
        assert held.returncode != 0 and "BlockingIOError" in held.stderr
    assert _try_lock(lock).returncode == 0  # released on exit
