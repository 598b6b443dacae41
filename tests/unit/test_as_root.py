"""scripts/as-root: root runs the command itself; another user goes through sudo, or is told what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

AS_ROOT = Path(__file__).resolve().parents[2] / "scripts" / "as-root"


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, env=env)


def _which(tool: str) -> str:
    path = shutil.which(tool)
    assert path is not None, f"{tool} is not on PATH"
    return path


def _as_nobody(bin_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    """``scripts/as-root ARGV`` as user nobody, with only ``bin_dir`` on PATH (a copy of the script there: the
    checkout may sit where nobody cannot read)."""
    copy = shutil.copy(AS_ROOT, bin_dir / "as-root")
    return _run(
        shutil.which("setpriv") or "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        str(copy),
        *argv,
        env={"PATH": str(bin_dir)},
    )


@pytest.fixture
def bin_dir() -> Iterator[Path]:
    """A PATH directory user nobody can read (pytest's tmp_path is root's own)."""
    d = Path(tempfile.mkdtemp(prefix="as-root-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="checks both sides, which needs root (CI runs as root)")
def test_root_runs_it_directly_and_another_user_without_sudo_is_told_why(bin_dir: Path) -> None:
    assert _run(str(AS_ROOT), "id", "-u").stdout.strip() == "0"
    # A user with no sudo on PATH: a clear error naming the command, nothing run.
    for tool in ("id", "sh"):
        (bin_dir / tool).symlink_to(_which(tool))
    r = _as_nobody(bin_dir, "apt-get", "install", "x")
    assert r.returncode == 1 and "'apt-get' needs root" in r.stderr and "sudo" in r.stderr, r


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_another_user_goes_through_sudo(bin_dir: Path) -> None:
    """A stand-in `sudo` on PATH says that it was asked, with the command and its arguments."""
    for tool in ("id", "sh"):
        (bin_dir / tool).symlink_to(_which(tool))
    fake = bin_dir / "sudo"
    fake.write_text('#!/bin/sh\necho "sudo $*"\n')
    fake.chmod(0o755)
    r = _as_nobody(bin_dir, "dockerd", "-x")
    assert r.returncode == 0 and r.stdout.strip() == "sudo --preserve-env=DEBIAN_FRONTEND dockerd -x", r
