"""The scale simulator's fragments on several processes: the same results as one, and nothing left behind.

Decoupled DiLoCo's fragments share nothing in the simulated syncer (each one's rounds start from the same timing),
so ``diloco-chaos simulate --scale --workers N`` forks N processes and simulates fragments at once. The runs that
fork are fresh interpreters (the CLI, or a short script): a pytest worker has threads of its own and JAX loaded, and
the simulator does not fork there (``_may_fork``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.scale import decoupled
from chaos.scale.config import build_scale_config
from chaos.scale.outages import unit_outages
from faults import procfs

ROOT = Path(__file__).resolve().parents[2]

# Heterogeneous learners over slow links with a quorum of 2: the time to quorum differs from round to round, so
# the moving averages behind the grace window move (with the defaults every round's is the same, and a timing
# carried from one fragment into the next would change nothing).
PLAN: dict[str, Any] = {
    "duration": 20000,
    "seed": 3,
    "cluster": {"chips": "150k"},
    "failures": {"mtbi_per_chip": 2e7},
    "algorithm": {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8, "min_quorum": 2},
    "workload": {"params": "1B", "step_s": 1.0, "step_s_overrides": {"1": 1.3, "2": 0.8}},
    "network": {"bandwidth": 1},
}


def test_a_fragment_s_rounds_are_the_same_simulated_alone_in_any_order() -> None:
    """What makes the workers' results the ones of one process: a fragment's rounds do not depend on which
    fragments were simulated before it (none of the syncer's state carries from one to the next)."""
    cfg = build_scale_config(PLAN)
    syncer, ups = decoupled.syncer_and_uploads(cfg, unit_outages(cfg, float(cfg.duration)))
    horizon = float(cfg.duration)
    forward = decoupled.each_fragment(syncer, ups, horizon, workers=1)
    backward = [decoupled._rounds_of(syncer, ups, horizon, p) for p in reversed(range(len(forward)))][::-1]
    assert len(forward) == 4 and all(r.merge_times for r in forward)
    assert backward == forward


def _simulate(tmp_path: Path, workers: int) -> tuple[list[dict[str, Any]], bool]:
    """The CLI's --json results with ``--workers``, in a fresh interpreter, and whether it forked."""
    plan, out = tmp_path / "plan.yaml", tmp_path / f"w{workers}.json"
    plan.write_text(yaml.safe_dump(PLAN))
    script = textwrap.dedent(
        f"""
        import sys
        from chaos.cli import main
        from chaos.scale import decoupled
        forked = []
        may_fork = decoupled._may_fork
        decoupled._may_fork = lambda: forked.append(may_fork()) or forked[-1]
        code = main(["simulate", "--scale", {str(plan)!r}, "--workers", "{workers}", "--quiet", "--json", {str(out)!r}])
        print("forked" if any(forked) else "not forked")
        sys.exit(code)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())["results"], done.stdout.strip().endswith("\nforked")


def test_workers_give_the_results_of_one_process(tmp_path: Path) -> None:
    one, forked_one = _simulate(tmp_path, 1)
    three, forked_three = _simulate(tmp_path, 3)
    assert not forked_one and forked_three  # the CLI's process may fork: it loads neither JAX nor gRPC
    assert three == one
    assert one[0]["failures"] > 0 and one[0]["details"]["merges"] > 0


def test_an_error_in_a_worker_ends_the_run_and_every_worker(tmp_path: Path) -> None:
    """A worker's exception reaches the caller as itself, and no worker outlives the run."""
    script = textwrap.dedent(
        f"""
        import multiprocessing
        from chaos.scale import decoupled
        from chaos.scale.config import build_scale_config
        from chaos.scale.engine import simulate_scale
        fragment = decoupled._Syncer.fragment
        def broken(self, p, rows, horizon):  # forked: the workers inherit it
            if p == 2:
                raise ValueError("fragment 2 broke")
            return fragment(self, p, rows, horizon)
        decoupled._Syncer.fragment = broken
        assert decoupled._may_fork()
        try:
            simulate_scale(build_scale_config({PLAN!r}), workers=2)
        except ValueError as err:
            print("raised:", err)
        print("workers left:", len(multiprocessing.active_children()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["raised: fragment 2 broke", "workers left: 0"]


def test_ctrl_c_ends_the_run_and_every_worker(tmp_path: Path) -> None:
    """Ctrl-C while the workers simulate (a terminal's: SIGINT to the whole process group): the command says so,
    once, and exits 2, and none of its processes is left."""
    out = str(tmp_path / "never-written.json")  # in the command line of the command and of its forked workers
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", "simulate", "--scale", "--chips", "2.4M", "--duration", "28d"]
        + ["--mode", "decoupled", "--workers", "2", "--json", out],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        for (
            line
        ) in proc.stderr:  # non-interactive progress: a line per quarter, the first after the first fragment
            if "fragments" in line:
                break
        assert len(procfs.matching(out)) == 3  # the command and its two workers
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 2
        said = [line for line in proc.stderr.read().splitlines() if not line.startswith("decoupled M=")]
        assert said == ["interrupted"]  # from the command (past its progress lines); nothing from its workers
        deadline = time.monotonic() + 10
        while procfs.matching(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert procfs.matching(out) == []
        assert not Path(out).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in procfs.matching(out):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_workers_must_be_a_whole_number_of_processes(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--scale", "--chips", "1k", "--workers", text])
    assert exit_.value.code == 2
    assert f"--workers takes a whole number of processes, 1 or more, not {text!r}" in capsys.readouterr().err
