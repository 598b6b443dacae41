"""The benchmarks' run path on real processes: stop_when, start_together_s, per-learner step delays, reuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import measures as m
from benchmarks.harness import run_cluster
from chaos.errors import RunError
from trainer import events as ev

pytestmark = pytest.mark.integration


def test_a_benchmark_run_stops_on_its_condition_with_learners_at_their_own_speed(tmp_path: Path) -> None:
    learner = {"step_delay_s": 0.03, "start_together_s": 60.0, "step_delay_overrides": {"learner-0": 0.09}}
    cluster: dict[str, Any] = {
        "token_budget": 10**12,
        "model": {"size": "tiny"},
        "algorithm": {"mode": "decoupled", "num_learners": 2, "sync_every": 8},
        "learner": learner,
    }
    h = run_cluster("harness", cluster, tmp_path, stop_when=lambda st: st.merges >= 30, timeout_s=300)

    finished = h.phase("finished")
    assert finished is not None and finished.detail["stopped_early"] is True
    teardown = h.teardown()
    assert teardown is not None
    assert teardown.proxies_left == [] and teardown.processes_left == []

    # Both learners compiled, then waited for each other: both saw the whole cluster joined.
    together = h.of(ev.StartTogether)
    assert sorted(e.source for e in together) == ["learner-0", "learner-1"]
    assert all(e.joined == 2 for e in together)
    firsts = {e.source: e.ts for e in h.of(ev.Step) if e.step == 1}
    # Nobody trains before every learner has joined: each compiled, then waited (an ordering, not a timing —
    # a 1 s bound on the start spread failed under doubled load).
    last_join = max(e.ts for e in h.of(ev.Join))
    waited = {e.source: e.ts for e in together}
    assert all(last_join <= waited[lid] <= firsts[lid] for lid in firsts), (last_join, waited, firsts)

    # Each learner's step delay is a floor on its step time: every step of learner-0 (its override) lasts at least
    # 0.09 s, every step of learner-1 at least 0.03 s. (Not "learner-1 is faster": on a loaded machine JAX's own
    # compute exceeds both floors — 0.13 s and 0.12 s seen while a CI run shared the cores.)
    times = {
        lid: [e.step_time_s for e in h.of(ev.Step) if e.source == lid and e.step > 5]
        for lid in ("learner-0", "learner-1")
    }
    assert times["learner-0"] and min(times["learner-0"]) >= 0.09, times
    assert times["learner-1"] and min(times["learner-1"]) >= 0.03, times
    assert m.training_start(h.events) == min(firsts.values())

    # A finished run is read back, not run again.
    again = run_cluster("harness", cluster, tmp_path, reuse=True)
    assert len(again.events) == len(h.events)

    # ... and only by the same configuration: a kept run of another one is refused, naming what differs.
    with pytest.raises(
        RunError, match=r"another configuration \(cluster\.learner\.step_delay_overrides\.learner-0"
    ):
        run_cluster(
            "harness",
            {**cluster, "learner": {**learner, "step_delay_overrides": {}}},
            tmp_path,
            reuse=True,
        )
