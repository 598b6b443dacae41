"""A real syncer and learners serve /metrics while they train, and every scrape agrees with their events.

Each process writes an event to its log and then moves its metrics (one lock, trainer.events.EventLog), so a
scrape taken between two readings of the log lies between the two counts: events read before <= scraped <=
events read after. The scrapes are parsed with Prometheus's own text parser.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import tiny_config, wait_until
from trainer import events as ev
from trainer.client import SyncClient
from trainer.config import learner_ids
from trainer.launch import LocalCluster
from trainer.telemetry import target_file

pytestmark = pytest.mark.integration


def _scrape(run_dir: Path, unit: str) -> dict[tuple[str, tuple], float]:
    (target,) = json.loads(target_file(run_dir, unit).read_text())
    assert target["labels"] == {
        "unit": unit,
        "role": "syncer" if unit == "syncer" else "learner",
        "run": run_dir.name,
    }
    text = urllib.request.urlopen(f"http://{target['targets'][0]}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _counts(path: Path) -> dict[str, Counter]:
    """What the log says so far: merges per fragment, rejections per (call, reason), uploads, last step."""
    c: dict[str, Counter] = {"merges": Counter(), "rejections": Counter(), "uploads": Counter(), "step": Counter()}
    for e in ev.read_events(path):
        if isinstance(e, ev.Merge):
            c["merges"][str(e.fragment)] += 1
        elif isinstance(e, ev.Reject):
            c["rejections"][(e.call, e.reason)] += 1 + e.repeats
        elif isinstance(e, ev.Upload):
            c["uploads"]["all"] += 1
        elif isinstance(e, ev.Step):
            c["step"]["last"] = e.step
    return c


def test_scrapes_of_a_training_syncer_and_learner_agree_with_their_events(tmp_path: Path) -> None:
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 2,
            "algorithm.num_fragments": 2,
            "algorithm.sync_every": 8,
        }
    )
    run = tmp_path / "run"
    cluster = LocalCluster(cfg, run)
    syncer_log, learner_log = run / "events" / "syncer.jsonl", run / "events" / "learner-0.jsonl"
    try:
        address = cluster.start_syncer()
        for lid in learner_ids(2):
            cluster.start_learner(lid)
        with SyncClient(address, "not-the-token", timeout_s=5.0) as stranger:  # two rejections to count
            for _ in range(2):
                with pytest.raises(grpc.RpcError) as refused:
                    stranger.join("learner-9", "x", cfg.config_hash())
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with cluster.client() as c:
            wait_until(lambda: c.status().merges >= 2, 180, "two merges")
            assert c.status().rejections["bad_token"] == 2
        seen_merges = 0.0
        for _ in range(3):  # while training goes on: the counts move between scrapes
            before_s, before_l = _counts(syncer_log), _counts(learner_log)
            s, lr = _scrape(run, "syncer"), _scrape(run, "learner-0")
            after_s, after_l = _counts(syncer_log), _counts(learner_log)
            for frag in ("0", "1"):
                got = s.get(("diloco_merges_total", (("fragment", frag),)), 0.0)
                assert before_s["merges"][frag] <= got <= after_s["merges"][frag], (frag, got)
            seen_merges = sum(s.get(("diloco_merges_total", (("fragment", f),)), 0.0) for f in ("0", "1"))
            key = ("diloco_rejections_total", (("call", "Join"), ("reason", "bad_token")))
            # The stranger's second refusal came within OUTSIDER_LOG_S of its first: folded into the next one logged
            # (trainer.core.repeats), so log and metrics count one; Status counts both.
            assert before_s["rejections"][("Join", "bad_token")] == s[key] == 1
            assert before_s["uploads"]["all"] <= s[("diloco_uploads_total", ())] <= after_s["uploads"]["all"]
            assert before_l["step"]["last"] <= lr[("diloco_learner_steps", ())] <= after_l["step"]["last"]
            assert lr[("diloco_learner_incarnation", ())] == 0
            with cluster.client() as c:
                merges = c.status().merges

                def another_merge(merges: int = merges) -> bool:
                    return c.status().merges > merges

                wait_until(another_merge, 60, "another merge")
        assert seen_merges >= 2
        assert s[("diloco_merge_participants_count", ())] == seen_merges
    finally:
        codes = cluster.stop_all()
    assert all(code is not None for code in codes.values()), "a child process was left running"
