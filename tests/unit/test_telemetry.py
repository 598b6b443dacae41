"""trainer.telemetry: each metric is the count or last value the events say (no process, no HTTP)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from trainer import events as ev
from trainer.telemetry import EventMetrics, MetricsServer


def _merge(n: int, fragment: int, who: list[str]) -> ev.Merge:
    parts = [
        ev.ParticipantInfo(
            learner_id=lid, incarnation=f"{lid}.0", weight=1.0, c_steps=8, c_tokens=64, base_version=n - 1
        )
        for lid in who
    ]
    return ev.Merge(
        ts=float(n),
        source="syncer",
        fragment=fragment,
        version=n,
        base_version=n - 1,
        participants=parts,
        rule="rda",
        wait_s=0.2,
        quorum_wait_s=0.05,
        outer_grad_norm=1.0,
        merges_total=n,
        tokens_total=64 * n,
    )


def test_syncer_metrics_follow_its_events() -> None:
    m = EventMetrics(CollectorRegistry(), num_fragments=2)
    events: list[ev.Event] = [
        ev.SyncerStart(
            ts=0.0,
            source="syncer",
            syncer_incarnation="s.0",
            address="a",
            config_hash="c",
            versions=[0, 0],
            restored_from_merges=-1,
            pid=1,
        ),
        _merge(1, 0, ["learner-0", "learner-1"]),
        _merge(2, 1, ["learner-0"]),
        _merge(3, 0, ["learner-1"]),
        ev.Reject(ts=3.5, source="syncer", call="Upload", reason="late_round", detail=""),
        ev.Reject(ts=3.6, source="syncer", call="Upload", reason="late_round", detail=""),
        ev.Upload(
            ts=3.7,
            source="syncer",
            learner_id="learner-0",
            learner_incarnation="learner-0.0",
            fragment=0,
            base_version=3,
            bytes=1000,
            seconds=0.02,
            c_steps=8,
            c_tokens=64,
            duplicate=False,
        ),
        ev.Eval(
            ts=4.0, source="syncer", merges_total=3, versions=[3, 2], loss=2.5, loss_floor=2.0, tokens_total=192
        ),
    ]
    for e in events:
        m.observe(e)
    value = m.registry.get_sample_value
    assert (
        value("diloco_merges_total", {"fragment": "0"}) == 2
        and value("diloco_merges_total", {"fragment": "1"}) == 1
    )
    assert value("diloco_merge_participants_count") == 3 and value("diloco_merge_participants_sum") == 4
    assert value("diloco_fragment_version", {"fragment": "0"}) == 3
    assert value("diloco_rejections_total", {"call": "Upload", "reason": "late_round"}) == 2
    assert value("diloco_upload_bytes_total") == 1000 and value("diloco_uploads_total") == 1
    assert value("diloco_eval_loss") == 2.5 and value("diloco_trained_tokens_counted") == 192
    assert (
        value("diloco_syncer_starts_total") == 1
        and value("diloco_unit_info", {"unit": "syncer", "incarnation": "s.0"}) == 1
    )
    assert (
        value("diloco_merged_tokens_total") == 64 * 4 / 2 and value("diloco_last_merge_timestamp_seconds") == 3.0
    )
    assert b"diloco_grace_wait_seconds_bucket" in generate_latest(m.registry)
    assert value("diloco_quorum_wait_seconds_sum") == pytest.approx(3 * (0.2 - 0.05))


def test_learner_metrics_follow_its_events() -> None:
    m = EventMetrics(CollectorRegistry())
    learner_events: list[ev.Event] = [
        ev.LearnerJoin(
            ts=0.0,
            source="learner-1",
            learner_incarnation="learner-1.2",
            incarnation_index=2,
            versions=[0],
            syncer_incarnation="s.0",
        ),
        ev.Step(ts=1.0, source="learner-1", step=10, loss=3.1, tokens=640, step_time_s=0.05, blocked_s=0.0),
        ev.Step(ts=1.0, source="learner-1", step=12, loss=3.0, tokens=768, step_time_s=0.05, blocked_s=0.0),
        ev.SyncResult(
            ts=1.1,
            source="learner-1",
            fragment=0,
            base_version=0,
            accepted=True,
            reason="",
            seconds=0.01,
            bytes=10,
        ),
        ev.SyncResult(
            ts=1.2,
            source="learner-1",
            fragment=1,
            base_version=0,
            accepted=False,
            reason="late_round",
            seconds=0.01,
            bytes=10,
        ),
    ]
    for e in learner_events:
        m.observe(e)
    value = m.registry.get_sample_value
    assert value("diloco_learner_incarnation") == 2 and value("diloco_learner_steps") == 12
    assert value("diloco_learner_tokens") == 768 and value("diloco_learner_loss") == 3.0
    assert value("diloco_learner_trained_tokens_total") == 768
    assert value("diloco_learner_syncs_total", {"accepted": "false", "reason": "late_round"}) == 1
    assert value("diloco_learner_syncs_total", {"accepted": "true", "reason": ""}) == 1


def test_an_event_that_moves_no_metric_changes_nothing() -> None:
    m = EventMetrics(CollectorRegistry())
    before = generate_latest(m.registry)
    m.observe(ev.Apply(ts=1.0, source="learner-0", fragment=0, version=1, step=3))
    assert generate_latest(m.registry) == before


def test_an_event_log_feeds_its_observers(tmp_path) -> None:
    m = EventMetrics(CollectorRegistry())
    log = ev.EventLog(tmp_path / "syncer.jsonl", "syncer", observers=(m.observe,))
    log.emit(ev.Reject(ts=1.0, source="", call="Join", reason="bad_credential", detail=""))
    log.close()
    assert (
        m.registry.get_sample_value("diloco_rejections_total", {"call": "Join", "reason": "bad_credential"}) == 1
    )
    assert '"reason":"bad_credential"' in (tmp_path / "syncer.jsonl").read_text()


def test_the_server_serves_what_the_events_counted() -> None:
    """A real scrape over loopback, parsed with Prometheus's own text parser."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    m = EventMetrics(CollectorRegistry())
    server = MetricsServer.start(m.registry)
    try:
        m.observe(ev.Reject(ts=1.0, source="syncer", call="Upload", reason="stale_incarnation", detail=""))
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        server.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("diloco_rejections_total", (("call", "Upload"), ("reason", "stale_incarnation")))] == 1.0


def test_a_taken_metrics_port_is_a_clear_error(tmp_path) -> None:
    import argparse
    import socket

    from trainer.telemetry import expose

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        args = argparse.Namespace(metrics_port=held.getsockname()[1], metrics_host="127.0.0.1")
        with pytest.raises(SystemExit, match=r"cannot serve /metrics on 127\.0\.0\.1:\d+: .*--metrics-port"):
            expose(args, tmp_path, "learner-0", "learner")
    assert not (tmp_path / "metrics" / "learner-0.json").exists()  # nothing announced


def test_a_process_exports_only_its_own_roles_metrics() -> None:
    """A syncer scraped beside learners must not show a learner loss of 0 (nor a learner merges)."""
    syncer, learner = EventMetrics(role="syncer"), EventMetrics(role="learner")
    s_text, l_text = generate_latest(syncer.registry).decode(), generate_latest(learner.registry).decode()
    assert "diloco_merges_total" not in l_text and "diloco_learner_loss" not in s_text
    assert "diloco_learner_loss" in l_text and "diloco_rejections_total" in s_text
    assert "diloco_unit_info" in s_text and "diloco_unit_info" in l_text
