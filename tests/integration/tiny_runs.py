"""Whole runs that more than one integration module judges, each launched once a session (the ``tiny_run``
fixture, tests/integration/conftest.py).

A tiny run is 10-16 s of the real-process phase; the launcher's tests and the merge audit's judged the same three
runs each launched twice. ``tiny_run(name)`` launches one of ``TINY_RUNS`` on first use and hands every later test
the same run directory (tests that change one work on a copy); a run that failed fails every test that asks for it,
with the launcher's output, and is not launched again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny-decoupled.yaml"
# Every merge's audit files kept (the merge audit recomputes each): it changes what is recorded, nothing the run does.
KEEP_AUDIT = "syncer.audit_keep_fraction=1"
TINY_RUNS: dict[str, tuple[str, ...]] = {
    "decoupled": (),  # the config's own budget
    "sync-diloco": ("algorithm.mode=sync-diloco", "token_budget=60000"),
    "data-parallel": ("algorithm.mode=data-parallel", "algorithm.sync_every=1", "token_budget=60000"),
}


@dataclass(frozen=True)
class LaunchedRun:
    run_dir: Path
    sets: tuple[str, ...]  # its overrides of the config (beyond KEEP_AUDIT)
    returncode: int
    output: str  # the end of the launcher's stdout and stderr


class TinyRuns:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.launched: dict[str, LaunchedRun] = {}

    def __call__(self, name: str) -> LaunchedRun:
        if name not in self.launched:
            run_dir, sets = self.base / name / "run", TINY_RUNS[name]
            args = [sys.executable, "-m", "trainer.launch", "--config", str(TINY), "--run-dir", str(run_dir)]
            for s in (KEEP_AUDIT, *sets):
                args += ["--set", s]
            out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=os.environ)
            self.launched[name] = LaunchedRun(run_dir, sets, out.returncode, (out.stdout + out.stderr)[-6000:])
        run = self.launched[name]
        assert run.returncode == 0, f"the {name} run failed (exit {run.returncode}):\n{run.output}"
        return run
