"""A call that carries a body over a slow link lives as long as its bytes need (trainer.core.deadlines).

Before, an upload's deadline was the RPC timeout plus 1 s per MB and a fragment fetch's the long poll plus one
timeout: over 500 KB/s links synchronous DiLoCo's uploads, sent while four fragments came down the same
connection, missed them, every retry started over, and training stopped (benchmarks.claims.reference_parity
--links, seed 100). Here a real syncer behind a real Toxiproxy bandwidth toxic takes an upload three times
longer than the old deadline allowed.
"""

from __future__ import annotations

import time

import pytest

from faults.toxiproxy import Toxic
from tests.support import raw_upload, served_syncer, tiny_config
from trainer.client import RetryPolicy, SyncClient
from trainer.core.deadlines import deadline_s
from trainer.policy import policy_from_config

pytestmark = pytest.mark.integration
TOKEN = "slow-link-token"
RATE_KBPS = 100  # Toxiproxy's bandwidth rate: KB/s
PIECE = 32 * 1024  # the upload's pieces: each crosses the link in ~0.3 s, well inside the 1 s timeout


def test_an_upload_slower_than_a_fixed_deadline_completes_while_its_pieces_cross(tmp_path, toxiproxy):
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 1, "algorithm.num_fragments": 1})
    tps = policy_from_config(cfg).tokens_per_step
    with served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port):
        proxy = toxiproxy.create_proxy("slow", "127.0.0.1:0", f"127.0.0.1:{port}")
        toxiproxy.add_toxic("slow", Toxic("slow-up", "bandwidth", "upstream", attributes={"rate": RATE_KBPS}))
        update, _, data = raw_upload(svc, "learner-0", c_steps=1, tokens_per_step=tps)
        crossing_s = len(data) / (RATE_KBPS * 1000)
        old_deadline_s = 1.0 + len(data) / 1e6
        assert crossing_s > 3 * old_deadline_s  # the old rule had to fail here
        with SyncClient(f"127.0.0.1:{proxy.port}", TOKEN, timeout_s=1.0, retry=RetryPolicy(attempts=1)) as client:
            assert client.join("learner-0", "i", cfg.config_hash()).ok
            t0 = time.monotonic()
            reply = client.upload("learner-0", "i", 0, 0, update, 1, tps, chunk_bytes=PIECE)
            took = time.monotonic() - t0
    assert reply.accepted, reply
    assert crossing_s * 0.9 <= took < deadline_s(1.0, len(data), PIECE), (took, crossing_s)
