"""Nightly: one of our built-ins on the namespace network backend (faults.netns, chaos.backends.local's
NamespacedLocalBackend): each learner in a network namespace of its own, reaching the syncer on the bridge's address
with no proxy; partition-one's fault drops the learner's packets in its namespace. Every check must pass as on the
Toxiproxy backend, the fault must have acted on the namespace, and nothing may be left behind. Needs root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chaos.backends.local import NamespacedLocalBackend
from chaos.history import FaultOp, History
from chaos.scenario import scenario_with

pytestmark = [
    pytest.mark.chaos_nightly(minutes=6),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def test_partition_one_passes_on_namespaces(
    chaos_toxiproxy: Any, chaos_baseline_cache: Path, tmp_path: Path
) -> None:
    from chaos.controller import RunOptions, run_scenario

    opts = RunOptions(
        tmp_path / "run",
        toxiproxy_url=chaos_toxiproxy.url,
        baseline_cache=chaos_baseline_cache,
        progress=lambda m: print(m, flush=True),
        backend=NamespacedLocalBackend,
    )
    r = run_scenario(scenario_with("partition-one"), opts)
    assert r.status == "pass", [(v.name, v.status, v.summary) for v in r.verdicts]
    ops = [o for o in History.read(r.out_dir).records if isinstance(o, FaultOp) and o.outcome == "ok"]
    injected = [o for o in ops if o.action == "inject"]
    assert injected and all("namespaces" in o.evidence for o in injected), injected  # not a proxy's toxic
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "dcx" not in left, left
