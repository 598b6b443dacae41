"""Hostile and malformed input, sent by a test client speaking the real protocol.

Each bad input must be refused with a reason in the reply (or a gRPC status
for auth), written as a ``reject`` event, counted in status, and must leave
the global state untouched.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from tests.support import tiny_config, wait_until
from trainer import events as ev
from trainer.client import SyncClient, specs_to_pb, upload_messages
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.syncer import serve
from trainer.wire import crc32, encode_tensors

pytestmark = pytest.mark.integration
TOKEN = "test-token"
TPS = policy_from_config(tiny_config()).tokens_per_step  # an honest step's tokens (batch × seq_len)


@pytest.fixture(scope="module")
def syncer(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("bad-input")
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 3,
            "algorithm.num_fragments": 4,
            "algorithm.min_quorum": 3,
            "algorithm.grace": False,
        }
    )
    server, svc, port = serve(cfg, run_dir, host="127.0.0.1", port=0, token=TOKEN)
    client = SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=5.0)
    join = client.join("good", "inc-good", cfg.config_hash())
    assert join.ok
    yield svc, client, join, port
    client.close()
    svc.shutdown("test over")
    server.stop(0).wait(5)


def _fragment(svc, p=0):
    names = svc.fragments[p].names
    return {n: np.zeros_like(svc.state.params[n]) for n in names}


def _snapshot(client):
    return {v.fragment: (v.version, v.tensors) for v in client.get_state("observer")}


def _assert_untouched(before, after):
    assert before.keys() == after.keys()
    for p, (version, tensors) in before.items():
        assert after[p][0] == version
        for n, t in tensors.items():
            np.testing.assert_array_equal(after[p][1][n], t)


def _rejects(svc, reason):
    return [
        e
        for e in ev.read_events(svc.run_dir / "events" / "syncer.jsonl")
        if isinstance(e, ev.Reject) and e.reason == reason
    ]


def _raw_upload(client, header, chunks):
    msgs = [pb.UploadChunk(header=header)] + [
        pb.UploadChunk(data=pb.DataChunk(offset=o, data=d)) for o, d in chunks
    ]
    return client.stub.Upload(iter(msgs), timeout=5, metadata=(("authorization", f"Bearer {TOKEN}"),))


def _raw_header(specs: list[pb.TensorSpec], total: int, crc: int = 0) -> pb.UploadHeader:
    """The good learner's honest one-step header for fragment 0 at base 0, declaring ``specs``."""
    return pb.UploadHeader(
        learner_id="good",
        incarnation="inc-good",
        fragment=0,
        base_version=0,
        c_steps=1,
        c_tokens=TPS,
        tensors=specs,
        total_bytes=total,
        crc32=crc,
    )


def _header(tensors, *, learner="good", inc="inc-good", fragment=0, base=0, payload=None, crc=None, total=None):
    specs, data = encode_tensors(tensors)
    payload = data if payload is None else payload
    return pb.UploadHeader(
        learner_id=learner,
        incarnation=inc,
        fragment=fragment,
        base_version=base,
        c_steps=1,
        c_tokens=TPS,
        tensors=specs_to_pb(specs),
        total_bytes=len(data) if total is None else total,
        crc32=crc32(payload) if crc is None else crc,
    ), data


def _check(svc, client, reason, send):
    before = _snapshot(client)
    count = svc.state.rejections[reason]
    reply = send()
    assert not reply.accepted
    assert reply.reason == reason, reply
    assert reply.detail, "a refusal must say what is wrong"
    assert client.status().rejections[reason] == count + 1
    wait_until(lambda: len(_rejects(svc, reason)) >= count + 1, 5, f"a reject event with reason {reason}")
    _assert_untouched(before, _snapshot(client))


def test_wrong_shape(syncer):
    svc, client, *_ = syncer
    t = _fragment(svc)
    name = sorted(t)[0]
    t[name] = np.zeros(t[name].size + 1, np.float32)
    _check(svc, client, "bad_shape", lambda: client.upload("good", "inc-good", 0, 0, t, 1, TPS))


def test_wrong_dtype(syncer):
    """A header declaring a dtype that is no wire format (float64, its bytes consistent) is refused."""
    svc, client, *_ = syncer
    t = _fragment(svc)
    data = b"".join(np.ascontiguousarray(t[n], "<f8").tobytes() for n in sorted(t))
    specs = [pb.TensorSpec(name=n, shape=list(t[n].shape), dtype="float64") for n in sorted(t)]
    h = _raw_header(specs, len(data), crc32(data))
    _check(svc, client, "bad_dtype", lambda: _raw_upload(client, h, [(0, data)]))


@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
def test_a_wire_format_other_than_the_runs_is_refused(syncer, fmt):
    """The run sends fp32 (algorithm.wire_format): a well-formed upload in another format is refused at its header,
    naming the format expected."""
    svc, client, *_ = syncer
    t = _fragment(svc)
    _check(svc, client, "bad_dtype", lambda: client.upload("good", "inc-good", 0, 0, t, 1, TPS, wire_format=fmt))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(syncer, bad):
    svc, client, *_ = syncer
    t = _fragment(svc)
    t[sorted(t)[0]].flat[0] = bad
    _check(svc, client, "non_finite", lambda: client.upload("good", "inc-good", 0, 0, t, 1, TPS))


def test_unknown_learner(syncer):
    svc, client, *_ = syncer
    _check(svc, client, "unknown_learner", lambda: client.upload("stranger", "x", 0, 0, _fragment(svc), 1, TPS))


def test_left_learner(syncer):
    svc, client, join, _ = syncer
    assert client.join("leaver", "inc-l", svc.config_hash).ok
    assert client.leave("leaver", "inc-l", "test").ok
    _check(svc, client, "left_learner", lambda: client.upload("leaver", "inc-l", 0, 0, _fragment(svc), 1, TPS))


def test_stale_incarnation(syncer):
    svc, client, *_ = syncer
    assert client.join("twice", "old", svc.config_hash).ok
    assert client.join("twice", "new", svc.config_hash).ok
    _check(svc, client, "stale_incarnation", lambda: client.upload("twice", "old", 0, 0, _fragment(svc), 1, TPS))


def test_future_base_version(syncer):
    svc, client, *_ = syncer
    _check(svc, client, "future_version", lambda: client.upload("good", "inc-good", 0, 99, _fragment(svc), 1, TPS))


def test_stale_base_version(syncer):
    svc, client, *_ = syncer
    with svc.cond:  # a fragment that has moved on (as after many merges elsewhere)
        svc.state.versions[1] += 5
    try:
        _check(
            svc,
            client,
            "stale_version",
            lambda: client.upload("good", "inc-good", 1, 0, _fragment(svc, 1), 1, TPS),
        )
    finally:
        with svc.cond:
            svc.state.versions[1] -= 5


def test_unknown_fragment(syncer):
    svc, client, *_ = syncer
    _check(
        svc, client, "unknown_fragment", lambda: client.upload("good", "inc-good", 17, 0, _fragment(svc), 1, TPS)
    )


def test_negative_counters(syncer):
    svc, client, *_ = syncer
    _check(svc, client, "bad_counters", lambda: client.upload("good", "inc-good", 0, 0, _fragment(svc), -1, TPS))


def test_duplicate_chunk(syncer):
    svc, client, *_ = syncer
    h, data = _header(_fragment(svc))
    half = len(data) // 2
    _check(svc, client, "duplicate_chunk", lambda: _raw_upload(client, h, [(0, data[:half]), (0, data[:half])]))


def test_oversize_stream(syncer):
    svc, client, *_ = syncer
    h, data = _header(_fragment(svc))
    _check(svc, client, "oversize", lambda: _raw_upload(client, h, [(0, data), (len(data), b"\0" * 64)]))


def test_declared_size_over_limit(syncer):
    svc, client, *_ = syncer
    h = _raw_header([pb.TensorSpec(name="huge", shape=[1 << 40], dtype="float32")], 4 << 40)
    _check(svc, client, "oversize", lambda: _raw_upload(client, h, []))


def test_truncated_stream(syncer):
    svc, client, *_ = syncer
    h, data = _header(_fragment(svc))
    _check(svc, client, "truncated", lambda: _raw_upload(client, h, [(0, data[: len(data) // 2])]))


def test_bad_checksum(syncer):
    svc, client, *_ = syncer
    h, data = _header(_fragment(svc), crc=0)
    if crc32(data) == 0:
        h.crc32 = 1
    _check(svc, client, "bad_checksum", lambda: _raw_upload(client, h, [(0, data)]))


def test_missing_header(syncer):
    svc, client, *_ = syncer
    msgs = iter([pb.UploadChunk(data=pb.DataChunk(offset=0, data=b"abc"))])
    _check(
        svc,
        client,
        "malformed",
        lambda: client.stub.Upload(msgs, timeout=5, metadata=(("authorization", f"Bearer {TOKEN}"),)),
    )


def test_config_mismatch_join(syncer):
    svc, client, *_ = syncer
    count = svc.state.rejections["config_mismatch"]
    reply = client.join("other", "inc-o", "not-the-hash")
    assert not reply.ok and reply.reason == "config_mismatch" and "config" in reply.detail
    assert client.status().rejections["config_mismatch"] == count + 1


@pytest.mark.parametrize(
    "metadata,reason",
    [
        ((), "missing_token"),
        ((("authorization", "Bearer wrong"),), "bad_token"),
        ((("authorization", TOKEN),), "bad_token"),
    ],
)  # not "Bearer <token>"
def test_calls_without_the_token_are_refused(syncer, metadata, reason):
    svc, client, _, port = syncer
    before = _snapshot(client)
    count = svc.state.rejections[reason]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = __import__("trainer.proto.diloco_pb2_grpc", fromlist=["SyncerStub"]).SyncerStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.Status(pb.StatusRequest(), timeout=5, metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert reason in err.value.details()
        h, data = _header(_fragment(svc))
        with pytest.raises(grpc.RpcError) as err:
            stub.Upload(upload_messages(h, data), timeout=5, metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert client.status().rejections[reason] == count + 2
    _assert_untouched(before, _snapshot(client))


def test_health_service_answers_without_token(syncer):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    _, _, _, port = syncer
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="diloco.v1.Syncer"), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_duplicate_upload_is_acknowledged_once(syncer):
    svc, client, *_ = syncer
    t = _fragment(svc, 2)
    first = client.upload("good", "inc-good", 2, 0, t, 1, TPS)
    again = client.upload("good", "inc-good", 2, 0, t, 1, TPS)
    assert first.accepted and not first.duplicate
    assert again.accepted and again.duplicate
    with svc.cond:
        assert len(svc.state.rounds[2].contributions) == 1  # K = 3: still waiting, counted once


def test_garbage_get_fragment_is_refused(syncer):
    svc, client, *_ = syncer
    with pytest.raises(grpc.RpcError) as err:
        client.get_fragment("good", 99, 0, 0.1)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown_fragment" in err.value.details()
