"""Header participation over the real protocol: a round takes the uploads whose header made it (trainer.core.inflight).

A real syncer on its step clock (K = 1, no grace, M = 2, H = 2, P = 1) paced at 2 s per step, so round 0 opens
4 s after the first report and a body's hold is at least one step (2 s) after its header. The slow learner's
header goes out before the opening and its body is held back by the test; the fast learner uploads whole.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from tests.support import raw_upload, served_syncer, tiny_config, wait_until
from trainer import events as ev
from trainer.client import SyncClient
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg
from trainer.wire import split_chunks

pytestmark = pytest.mark.integration
TOKEN = "header-test-token"
PACE = 2.0  # seconds per cluster step: round 0 opens at cluster step H + offset = 2, 4 s after the first report


def _merge(svc):
    return next(
        (e for e in ev.read_events(svc.run_dir / "events" / "syncer.jsonl") if isinstance(e, ev.Merge)), None
    )


def _round(tmp_path, body_after_s: float | None):
    """Run round 0 with the slow learner's body sent ``body_after_s`` after the round's merge time (None: never,
    until the merge is over); returns (the merge event, the slow upload's reply, its header's time, the opening)."""
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 2,
            "algorithm.num_fragments": 1,
            "algorithm.sync_every": 2,
            "algorithm.min_quorum": 1,
            "algorithm.grace": False,
            "syncer.liveness_timeout_s": 60,
        }
    )
    tps = policy_from_config(cfg).tokens_per_step
    release = threading.Event()
    replies: list = []
    with (
        served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port),
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=30.0) as client,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        for lid in ("fast", "slow"):
            assert client.join(lid, "i", cfg.config_hash()).ok
            assert client.report(
                pb.ReportRequest(learner_id=lid, incarnation="i", step=1, tokens=tps, step_time_s=PACE)
            ).ok
        opens = svc.state.clock.time_of(2.0)  # round 0 of the only fragment: cluster step H = 2
        update, header, data = raw_upload(svc, "slow", c_steps=2, tokens_per_step=tps)

        def slow_body():  # the header now, the body when the test says (a slow link, a stalled learner)
            yield pb.UploadChunk(header=header)
            release.wait(60)
            for off, chunk in split_chunks(data):
                yield pb.UploadChunk(data=pb.DataChunk(offset=off, data=chunk))

        def send_slow():
            replies.append(
                pbg.SyncerStub(channel).Upload(
                    slow_body(), timeout=60, metadata=(("authorization", f"Bearer {TOKEN}"),)
                )
            )

        wait_until(lambda: time.time() >= opens - 1.0, 10, "one second before round 0 opens")
        sender = threading.Thread(target=send_slow, daemon=True)
        sender.start()
        announced = wait_until(lambda: next(iter(svc.state.announced.values()), None), 10, "the slow header")
        assert client.upload("fast", "i", 0, 0, update, 2, 2 * tps, round=0).accepted
        try:
            if body_after_s is not None:
                wait_until(lambda: time.time() >= opens + body_after_s, 10, "the body's release time")
                release.set()
            merge = wait_until(lambda: _merge(svc), 20, "round 0's merge")
        finally:
            release.set()
            sender.join(30)
        return merge, replies[0], announced, opens


def test_a_body_slower_than_the_grace_window_is_merged_in_the_round_its_header_made(tmp_path):
    merge, reply, announced, opens = _round(tmp_path, body_after_s=0.3)
    assert announced < opens and reply.accepted and not reply.late, reply
    assert sorted(p.learner_id for p in merge.participants) == ["fast", "slow"]
    assert merge.held == 1 and merge.held_s >= 0.25, (
        merge
    )  # it waited past its merge time (the opening) for the body


def test_a_header_then_silence_costs_one_hold_then_the_round_merges_without_it(tmp_path):
    merge, reply, announced, opens = _round(tmp_path, body_after_s=None)
    assert [p.learner_id for p in merge.participants] == ["fast"]
    # The hold is at least one step (2 s) after the header, which came about 1 s before the opening.
    assert merge.ts >= announced + PACE - 0.05 and merge.held == 0, (merge, announced)
    assert not reply.accepted and reply.reason == "late_round", reply
