"""An upload's body keeps its learner alive, over the real protocol (trainer.core.syncer_records.heard_at).

Over a slow link a fragment's body takes longer than the liveness timeout and the learner's reports wait behind it
on the same connection. The real syncer, on a clock the test moves, hears a learner only through the pieces of its
body: it must count that learner active while they come and stop counting them once the body ends.
"""

from __future__ import annotations

import threading

import grpc
import pytest

from tests.support import raw_upload, served_syncer, tiny_config, wait_until
from trainer.client import SyncClient
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg
from trainer.wire import split_chunks

pytestmark = pytest.mark.integration
TOKEN = "body-liveness-token"


def test_the_pieces_of_a_body_keep_its_learner_active_past_the_liveness_timeout(tmp_path):
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 2,
            "algorithm.num_fragments": 1,
            "syncer.liveness_timeout_s": 5,
        }
    )
    tps = policy_from_config(cfg).tokens_per_step
    go = threading.Semaphore(0)  # one release per piece of the body
    replies: list = []
    with (
        served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port),
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=30.0) as client,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        t0 = svc.clock()
        now = [t0]
        svc.clock = lambda: now[0]  # the syncer's time is the test's from here
        for lid in ("quiet", "slow"):
            assert client.join(lid, "i", cfg.config_hash()).ok
            assert client.report(pb.ReportRequest(learner_id=lid, incarnation="i", step=1, tokens=tps)).ok
        _, header, data = raw_upload(svc, "slow", c_steps=1, tokens_per_step=tps)
        pieces = list(split_chunks(data, len(data) // 4 + 1))

        def body():
            yield pb.UploadChunk(header=header)
            for off, chunk in pieces:
                go.acquire(timeout=30)
                yield pb.UploadChunk(data=pb.DataChunk(offset=off, data=chunk))

        def send():
            stub = pbg.SyncerStub(channel)
            replies.append(stub.Upload(body(), timeout=60, metadata=(("authorization", f"Bearer {TOKEN}"),)))

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            slow = svc.state.learners["slow"]
            key = wait_until(lambda: next(iter(slow.bodies), None), 10, "the slow upload's header")
            for t in (3.0, 6.0, 9.0):  # a piece every 3 s: the last report was at t0
                now[0] = t0 + t
                go.release()
                wait_until(
                    lambda t=t: slow.bodies.get(key) == t0 + t, 10, f"the syncer hearing the piece at {t} s"
                )
            now[0] = t0 + 11.0
            with svc.cond:
                active = {r.learner_id for r in svc.state.active_learners(now[0])}
            assert active == {"slow"}, active  # the quiet one, silent 11 s, is not
        finally:
            for _ in pieces:
                go.release()
            sender.join(30)
        assert replies and replies[0].accepted, replies
        with svc.cond:
            assert slow.bodies == {} and slow.last_seen == now[0]  # the body is in: an ordinary sign of life now
