"""Interrupting a run mid-fault (SIGINT or SIGTERM to the CLI) leaves nothing behind.

No proxy of the run is left on the Toxiproxy server (so no toxic and no
disabled proxy), no process of the run is alive, every active fault's heal is
recorded, and the exit code is 2.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from chaos.history import FaultOp, History
from faults import procfs
from tests.support import run_processes, wait_until
from trainer import events as ev

pytestmark = pytest.mark.chaos

SCENARIO = """
name: interrupt-me
cluster:
  token_budget: 100000000
  model: {size: tiny}
  algorithm: {mode: decoupled, num_learners: 3}
schedule:
  - {fault: partition, id: cut, targets: [learner-0], at: 0.5, duration: 600}
  - {fault: bandwidth, id: slow-links, rate_kbps: 100, targets: [learner-1, learner-2], at: 0.5, duration: 600}
  - {fault: pause, id: frozen, targets: [learner-2], at: 0.5, duration: 600}
  - {fault: link_down, id: down, targets: [learner-1], at: 0.5, duration: 600}
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_mid_fault_heals_and_stops_everything(sig, chaos_toxiproxy, tmp_path):
    scenario = tmp_path / "interrupt-me.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "run",
            str(scenario),
            "--out",
            str(out),
            "--no-baseline",
            "--toxiproxy-url",
            chaos_toxiproxy.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def all_injected() -> bool:
            path = out / "controller.jsonl"
            if not path.exists():
                return False
            ops = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            return (
                sum(
                    1 for o in ops if o.get("kind") == "fault" and o["action"] == "inject" and o["outcome"] == "ok"
                )
                == 4
            )

        wait_until(all_injected, 240, "all four faults injected")
        time.sleep(1.0)
        running = run_processes(out)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, output
    assert "interrupted" in output
    history = History.read(out)
    bring_up = history.phase("bring_up")
    assert bring_up is not None
    prefix = bring_up.detail["proxy_prefix"]
    assert [n for n in chaos_toxiproxy.client().proxies() if n.startswith(prefix)] == []
    assert sorted(running.values()) == ["learner-0", "learner-1", "learner-2", "syncer"], running
    pids = [e.pid for e in history.events if isinstance(e, (ev.LearnerStart, ev.SyncerStart))]
    assert [p for p in [*running, *pids] if procfs.alive(p)] == []
    assert run_processes(out) == {}
    heals = {
        r.fault_id: r.outcome
        for r in history.records
        if isinstance(r, FaultOp) and r.action == "heal" and r.outcome != "invoke"
    }
    assert heals == {"cut": "ok", "slow-links": "ok", "frozen": "ok", "down": "ok"}
    teardown = history.teardown()
    assert teardown is not None
    assert teardown.proxies_left == [] and teardown.processes_left == []
