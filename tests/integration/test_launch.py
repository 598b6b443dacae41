"""The launcher: a whole run writes its run directory; interruption leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from faults import procfs
from tests.integration.tiny_runs import TINY
from tests.support import wait_until
from trainer.events import read_events

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(run_dir, *sets):
    args = [
        sys.executable,
        "-m",
        "trainer.launch",
        "--config",
        str(TINY),
        "--run-dir",
        str(run_dir),
    ]
    for s in sets:
        args += ["--set", s]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_launch_trains_to_budget_and_writes_run_directory(tiny_run):
    run_dir = tiny_run("decoupled").run_dir  # the config's own budget
    for name in ("config.yaml", "seeds.json", "metrics.json", "final.npz", "syncer.json"):
        assert (run_dir / name).exists(), name
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["final_eval_is_final"] and m["tokens_total"] >= 300000
    start = m["eval_curve"][0]
    assert start[0] == 0  # the syncer evaluates the initial model
    assert m["final_eval_loss"] < start[1] - 0.5, m["eval_curve"]
    logs = {n: (run_dir / "logs" / f"{n}.log").read_text()[-2000:] for n in m["exit_codes"]}
    assert m["exit_codes"] == {"syncer": 0, "learner-0": 0, "learner-1": 0, "learner-2": 0}, logs
    for f in ("syncer", "learner-0", "learner-1", "learner-2"):
        assert read_events(run_dir / "events" / f"{f}.jsonl"), f
    assert not procfs.matching(str(run_dir))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_launcher_stops_every_process(tmp_path, sig):
    run_dir = tmp_path / "run"
    proc = _launch(run_dir, "token_budget=1000000000")
    wait_until(lambda: len(procfs.matching(str(run_dir))) >= 4, 120, "the syncer and three learners to start")
    wait_until(lambda: (run_dir / "events" / "learner-0.jsonl").exists(), 120, "learner-0 to write events")
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    time.sleep(0.5)
    assert not procfs.matching(str(run_dir)), "a child process outlived the launcher"


def test_launcher_sigkill_orphans_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = _launch(run_dir, "token_budget=1000000000")
    wait_until(lambda: len(procfs.matching(str(run_dir))) >= 4, 120, "the syncer and three learners to start")
    proc.kill()
    proc.communicate(timeout=30)
    wait_until(lambda: not procfs.matching(str(run_dir)), 30, "children to exit after the launcher was SIGKILLed")


@pytest.mark.parametrize("mode", ["sync-diloco", "data-parallel"])
def test_synchronous_baselines_merge_every_learner_together(tiny_run, mode):
    merges = [e for e in read_events(tiny_run(mode).run_dir / "events" / "syncer.jsonl") if e.kind == "merge"]
    assert merges
    # K = M: every merge before the final flush has all three learners.
    assert all(len(m.participants) == 3 for m in merges[:-4]), [len(m.participants) for m in merges]
    if mode == "data-parallel":
        assert {m.rule for m in merges} == {"mean"}


@pytest.mark.parametrize("module", ["trainer.launch", "trainer.syncer", "trainer.learner"])
def test_bad_config_flag_exits_2_naming_the_field(tmp_path, module):
    extra = {
        "trainer.launch": [],
        "trainer.syncer": ["--run-dir", str(tmp_path)],
        "trainer.learner": ["--run-dir", str(tmp_path), "--id", "x", "--syncer", "127.0.0.1:1"],
    }[module]
    out = subprocess.run(
        [sys.executable, "-m", module, "--set", "algorithm.min_quorum=9", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "min_quorum" in out.stderr and "num_learners" in out.stderr


def test_a_process_error_quotes_the_end_of_its_log(tmp_path):
    """A syncer that dies at start-up: the error shows why (CI output has no run directory to open)."""
    from trainer.launch import see_log

    log = tmp_path / "syncer.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)) + "Fatal Python error: Aborted\n\n")
    msg = see_log(log)
    assert msg.startswith(f"see {log}; its last lines:")
    assert "Fatal Python error: Aborted" in msg and "line 39" in msg
    assert "line 20" not in msg  # only the end
    log.write_text("")
    assert see_log(log) == f"see {log}"
