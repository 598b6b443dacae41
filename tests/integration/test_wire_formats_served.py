"""A run whose learners send int4 outer gradients (algorithm.wire_format): the real syncer over gRPC accepts them,
counts their bytes on the wire, merges what they decode to, and refuses fp32."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import tiny_config, wait_until
from trainer import events as ev
from trainer.client import SyncClient
from trainer.core.wire_formats import nbytes, roundtrip
from trainer.policy import policy_from_config
from trainer.syncer import serve

pytestmark = pytest.mark.integration
TOKEN = "test-token"


def test_an_int4_run_merges_what_its_uploads_decode_to(tmp_path) -> None:
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 1,
            "algorithm.num_fragments": 2,
            "algorithm.min_quorum": 1,
            "algorithm.grace": False,
            "algorithm.wire_format": "int4",
        }
    )
    tps = policy_from_config(cfg).tokens_per_step
    server, svc, port = serve(cfg, tmp_path, host="127.0.0.1", port=0, token=TOKEN)
    client = SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=5.0)
    try:
        assert client.join("L", "inc", cfg.config_hash()).ok
        names = svc.fragments[0].names
        before = {n: svc.state.params[n].copy() for n in names}
        rng = np.random.default_rng(0)
        delta = {n: (1e-3 * rng.standard_normal(before[n].shape)).astype(np.float32) for n in names}
        refused = client.upload("L", "inc", 0, 0, delta, 1, tps, round=0)  # fp32: not the run's format
        assert not refused.accepted and refused.reason == "bad_dtype" and "int4" in refused.detail
        reply = client.upload("L", "inc", 0, 0, delta, 1, tps, round=0, wire_format="int4")
        assert reply.accepted, reply
        wait_until(lambda: svc.state.versions[0] >= 1, 10, "the round's merge")
        uploads = [e for e in ev.read_events(tmp_path / "events" / "syncer.jsonl") if isinstance(e, ev.Upload)]
        assert [u.bytes for u in uploads] == [sum(nbytes("int4", d.size) for d in delta.values())]
        # One contribution, one outer Nesterov step from zero momentum: Θ − lr·(1 + μ)·Δ, Δ what int4 carried.
        a = cfg.algorithm
        for n in names:
            want = before[n] - a.outer_lr * (1 + a.outer_momentum) * roundtrip(delta[n], "int4")
            np.testing.assert_allclose(svc.state.params[n], want, rtol=1e-5, atol=1e-7)
    finally:
        client.close()
        svc.shutdown("test over")
        server.stop(0).wait(5)
