"""A learner that lies through its numbers, speaking the real protocol to a real syncer (issue 16's attacks).

Each test is an attack a client holding the shared token could mount on the syncer before counters were bounded
(trainer.core.claims): it must be refused with a reason, or capped to what the syncer can bound, and never
merged, never counted toward the budget beyond what time allows, never able to stop training.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent import futures
from contextlib import contextmanager

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.measures import percentile
from tests.support import served_syncer, tiny_config, wait_until
from trainer import events as ev
from trainer.admission import worker_budget
from trainer.client import SyncClient, upload_request
from trainer.core.claims import MAX_COUNT
from trainer.core.credentials import learner_credential
from trainer.core.syncer_policy import STEP_SLACK
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg
from trainer.syncer import OUTSIDER_LOG_S

pytestmark = pytest.mark.integration
TOKEN = "hostile-test-token"
PACE = 0.05  # the honest learner's step time


@contextmanager
def _joined(tmp_path, min_quorum):
    """A syncer merging each round as soon as K uploads arrived (arrival rounds), an honest learner setting the pace."""
    cfg = tiny_config(
        **{
            "token_budget": 10**9,
            "algorithm.num_learners": 3,
            "algorithm.num_fragments": 2,
            "algorithm.min_quorum": min_quorum,
            "algorithm.grace": False,
            "algorithm.rounds": "arrival",
            "syncer.liveness_timeout_s": 60,
        }
    )
    with (
        served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port),
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=10.0) as client,
    ):
        tps = policy_from_config(cfg).tokens_per_step
        for lid in ("good", "rogue"):
            assert client.join(lid, f"inc-{lid}", cfg.config_hash()).ok
        _report(client, "good", step=2, tps=tps, step_time_s=PACE)
        yield svc, client, tps


@pytest.fixture
def cluster(tmp_path):
    with _joined(tmp_path, min_quorum=1) as joined:
        yield joined


@pytest.fixture
def pair(tmp_path):
    """The same with K = 2: the honest learner's and the rogue's uploads merge together."""
    with _joined(tmp_path, min_quorum=2) as joined:
        yield joined


def _report(client, lid, *, step, tps, step_time_s=PACE, tokens=None):
    return client.report(
        pb.ReportRequest(
            learner_id=lid,
            incarnation=f"inc-{lid}",
            step=step,
            tokens=step * tps if tokens is None else tokens,
            step_time_s=step_time_s,
        )
    )


def _update(svc, fragment, per_element):
    return {n: np.full_like(svc.state.params[n], per_element) for n in svc.fragments[fragment].names}


def _upload(client, lid, fragment, base, tensors, c_steps, c_tokens):
    return client.upload(lid, f"inc-{lid}", fragment, base, tensors, c_steps, c_tokens)


def _merged(svc, fragment, version):
    return wait_until(
        lambda: svc.state.versions[fragment] >= version, 10, f"fragment {fragment} at version {version}"
    )


def _honest_steps(svc):
    """The steps an honest learner at the cluster's pace has taken since it joined."""
    with svc.cond:
        return max(1, int((time.time() - svc.state.learners["good"].joined_at) / PACE))


def test_an_absurd_step_count_is_refused_and_a_large_one_cannot_smuggle_garbage(cluster):
    svc, client, tps = cluster
    huge = _update(svc, 0, 1e16)
    r = _upload(client, "rogue", 0, 0, huge, 2**63 - 1, 0)
    assert not r.accepted and r.reason == "bad_counters" and "2^53" in r.detail
    # In range but far more steps than time allows: capped, so the per-step norm stays absurd and is refused.
    r = _upload(client, "rogue", 0, 0, huge, 10**12, 10**12 * tps)
    assert not r.accepted and r.reason == "outlier_norm", r
    assert svc.state.versions[0] == 0 and np.all(np.abs(svc.state.params[svc.fragments[0].names[0]]) < 1e3)


def test_self_declared_tokens_cannot_take_over_a_merge(pair):
    svc, client, tps = pair
    r = _upload(client, "rogue", 0, 0, _update(svc, 0, 1e-4), 1, 2**40)
    assert not r.accepted and r.reason == "bad_counters" and f"a step is {tps} tokens" in r.detail
    # Consistent tokens, impossible steps: capped at what max_speedup × the pace allows since it joined, so its
    # weight (c_tokens² / c_steps, ∝ c_steps) is at most about max_speedup times an honest learner's.
    time.sleep(2.0)  # both have trained ~40 steps at the pace
    honest = _honest_steps(svc)
    assert _upload(client, "good", 0, 0, _update(svc, 0, 1e-4), honest, honest * tps).accepted
    assert _upload(client, "rogue", 0, 0, _update(svc, 0, 1e-4), 10**12, 10**12 * tps).accepted
    after = time.time()
    merge = wait_until(
        lambda: next((e for e in _events(svc) if isinstance(e, ev.Merge)), None), 10, "the merge event"
    )
    by = {p.learner_id: p for p in merge.participants}
    p = svc.state.policy
    allowed = (
        p.max_speedup * (after - svc.state.learners["rogue"].joined_at) / PACE
        + STEP_SLACK
        + p.algorithm.overlap_floor
    )
    assert by["rogue"].c_steps <= allowed and by["rogue"].c_tokens == by["rogue"].c_steps * tps
    assert by["good"].weight >= 0.1, merge.participants  # on main: 0.0 against the rogue's 1.0


def test_the_outlier_guard_cannot_be_poisoned_or_switched_off(cluster):
    svc, client, tps = cluster
    version = 0
    for _ in range(6):  # a rogue's tiny updates, all merged: alone it is not the learners' median
        assert _upload(client, "rogue", 0, version, _update(svc, 0, 1e-12), 1, tps).accepted
        version = _merged(svc, 0, version + 1) and svc.state.versions[0]
    lr = svc.cfg.inner.lr
    honest = _upload(client, "good", 0, version, _update(svc, 0, 0.5 * lr * 4), 4, 4 * tps)
    assert honest.accepted, honest  # an honest-sized update (half an AdamW step per step) is not an outlier
    version = _merged(svc, 0, version + 1) and svc.state.versions[0]
    for _ in range(6):  # zero updates: the median may reach 0, the guard must stay on
        assert _upload(client, "rogue", 0, version, _update(svc, 0, 0.0), 1, tps).accepted
        version = _merged(svc, 0, version + 1) and svc.state.versions[0]
    r = _upload(client, "rogue", 0, version, _update(svc, 0, 1e30), 1, tps)
    assert not r.accepted and r.reason == "outlier_norm" and "AdamW" in r.detail, r
    assert np.all(np.isfinite(svc.state.params[svc.fragments[0].names[0]]))


def test_one_report_cannot_end_training_or_break_status(cluster):
    svc, client, tps = cluster
    r = _report(client, "rogue", step=2**62 // tps, tps=tps, tokens=2**62)
    assert not r.ok and r.reason == "bad_counters", r
    r = _report(client, "rogue", step=10**12, tps=tps)  # consistent, in range, impossible in the time it had
    assert r.ok and not r.stop, r
    r = _report(client, "rogue", step=10**12, tps=tps)
    st = client.status()
    assert not st.finished and st.tokens < 10_000 * tps, st.tokens  # counted only as fast as time allows
    assert st.tokens < MAX_COUNT
    r = _report(
        client, "rogue", step=3, tps=tps, tokens=3 * tps + 1
    )  # tokens that are not steps × tokens_per_step
    assert not r.ok and r.reason == "bad_counters"


def test_a_never_issued_negative_base_version_is_refused(cluster):
    svc, client, tps = cluster
    r = _upload(client, "rogue", 0, -1, _update(svc, 0, 1e-4), 1, tps)
    assert not r.accepted and r.reason == "future_version" and "never issued" in r.detail
    assert svc.state.versions[0] == 0


def _events(svc):
    return ev.read_events(svc.run_dir / "events" / "syncer.jsonl")


def test_a_learner_credential_acts_as_its_own_learner_only(tmp_path):
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    with (
        served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port),
        SyncClient(f"127.0.0.1:{port}", learner_credential(TOKEN, "learner-0"), timeout_s=10.0) as own,
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=10.0) as operator,
    ):
        tps = policy_from_config(cfg).tokens_per_step
        assert operator.join("learner-1", "inc-1", cfg.config_hash()).ok  # the operator's secret names any id
        assert own.join("learner-0", "inc-a", cfg.config_hash()).ok
        for reply in (
            own.join("learner-1", "inc-x", cfg.config_hash()),
            own.report(pb.ReportRequest(learner_id="learner-1", incarnation="inc-1", step=1, tokens=tps)),
            own.leave("learner-1", "inc-1", "hostile"),
        ):
            assert not reply.ok and reply.reason == "wrong_learner", reply
        up = own.upload("learner-1", "inc-1", 0, 0, _update(svc, 0, 1e-4), 1, tps)
        assert not up.accepted and up.reason == "wrong_learner"
        assert svc.state.learners["learner-1"].incarnation == "inc-1" and not svc.state.learners["learner-1"].left
        assert own.join("learner-0", "inc-b", cfg.config_hash()).ok  # a restart of its own id is still allowed
        assert own.status().rejections["wrong_learner"] == 4  # and it may read the cluster's status
        with (
            SyncClient(
                f"127.0.0.1:{port}", learner_credential("another-secret", "learner-0"), timeout_s=10.0
            ) as forged,
            pytest.raises(Exception, match="bad_token"),
        ):
            forged.join("learner-0", "inc-c", cfg.config_hash())


def _hold_long_poll(stub, metadata, wait_s):
    """A GetFragment long poll for a version that never comes: holds a worker until wait_s (or a cancel)."""
    req = pb.FragmentRequest(learner_id="x", fragment=0, min_version=10**9, wait_s=wait_s)
    try:
        for _ in stub.GetFragment(req, timeout=wait_s + 30, metadata=metadata):
            pass
        return "held"
    except grpc.RpcError as err:
        return err.code().name


def test_long_calls_cannot_starve_status_and_health(tmp_path):
    """One learner holding 3× its share of long polls, the operator flooding the rest of the pool: each learner
    gets its share, the rest is refused at once (busy), and Status and health answer throughout."""
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    per_learner, total = cfg.algorithm.num_fragments + 4, worker_budget(2, 2, at_least=32).long
    learner_md = (("authorization", f"Bearer {learner_credential(TOKEN, 'learner-0')}"),)
    operator_md = (("authorization", f"Bearer {TOKEN}"),)
    wait_s = 20.0
    with (
        served_syncer(cfg, tmp_path, token=TOKEN, max_workers=32, max_call_s=60) as (svc, port),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=10.0) as operator,
    ):
        stub = pbg.SyncerStub(channel)
        with futures.ThreadPoolExecutor(max_workers=3 * per_learner + total + 8) as pool:
            mine = [pool.submit(_hold_long_poll, stub, learner_md, wait_s) for _ in range(3 * per_learner)]
            wait_until(
                lambda: sum(f.done() for f in mine) >= 2 * per_learner, 15, "the learner's extra calls refused"
            )
            flood = [pool.submit(_hold_long_poll, stub, operator_md, wait_s) for _ in range(total)]
            wait_until(
                lambda: sum(f.done() for f in flood) >= per_learner, 15, "the operator's extra calls refused"
            )
            latencies = []
            for _ in range(10):  # every worker a long call may take is taken
                t0 = time.monotonic()
                st = operator.status()
                health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
                latencies.append(time.monotonic() - t0)
                assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert max(latencies) < 5.0, latencies  # p100 of Status + health while the pool is held
            assert st.rejections["busy"] == 2 * per_learner + per_learner
            svc.shutdown("test over")  # wakes the long polls
            outcomes = Counter(f.result(timeout=60) for f in mine + flood)
        assert outcomes == {"held": total, "RESOURCE_EXHAUSTED": 3 * per_learner}, outcomes


def _half_open(channel, method: str, metadata, release: threading.Event):
    """A call whose headers are sent and whose request never is (a client stream that blocks): its future."""

    def never():
        release.wait()
        return
        yield

    call = channel.stream_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    return call.future(never(), timeout=60, metadata=metadata)


def test_calls_opened_and_never_sent_cannot_starve_status_and_health(tmp_path):
    """Invariant `capacity` (docs/security.md): 100 half-open Syncer calls and 100 half-open health checks without a
    credential, and an insider's half-open Reports and long polls: Status and the operator's health answer at
    once; an outsider's health probe is refused busy at once, never left hanging. (Before: every call hung until its
    deadline.) The first-message timer is long here, so no slot frees up during the test; the next test shortens it."""
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    learner_md = (("authorization", f"Bearer {learner_credential(TOKEN, 'learner-0')}"),)
    operator_md = (("authorization", f"Bearer {TOKEN}"),)
    release = threading.Event()
    with (
        served_syncer(cfg, tmp_path, token=TOKEN, first_message_s=120) as (svc, port),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        chans = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
        try:
            held = [
                _half_open(chans[i % 4], method, md, release)
                for i in range(100)
                for method, md in (
                    ("/diloco.v1.Syncer/Status", ()),
                    ("/grpc.health.v1.Health/Check", ()),
                    ("/diloco.v1.Syncer/Report", learner_md),
                    ("/diloco.v1.Syncer/GetFragment", learner_md),
                )
            ]
            wait_until(lambda: sum(f.done() for f in held) >= 200, 30, "the outsider's Status calls refused")
            health = health_pb2_grpc.HealthStub(channel)
            for _ in range(5):
                t = time.monotonic()
                st = pbg.SyncerStub(channel).Status(pb.StatusRequest(), timeout=5, metadata=operator_md)
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=5, metadata=operator_md)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING and time.monotonic() - t < 2.0
            with pytest.raises(grpc.RpcError) as probe:
                health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert probe.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # at once, not at its deadline
            codes = Counter(f.exception().code().name for f in held if f.done())
            assert codes["UNAUTHENTICATED"] == 100 and codes["RESOURCE_EXHAUSTED"] >= 96, codes
            assert st.rejections["busy"] > 0
        finally:
            release.set()
            for c in chans:
                c.close()


def test_an_outsiders_flood_costs_the_log_one_line_per_kind_and_window(tmp_path):
    """Invariant `output` (docs/security.md): 300 calls without a credential are all refused and counted (Status),
    logged once per call, reason and OUTSIDER_LOG_S, the rest folded into the next line; after shutdown the log's
    lines account for every one (1 + repeats each), so nothing is lost and nothing grows per call."""
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2})
    with served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pbg.SyncerStub(channel)
            t0 = time.monotonic()
            for _ in range(300):
                with pytest.raises(grpc.RpcError):
                    stub.Status(pb.StatusRequest(), timeout=5)
            elapsed = time.monotonic() - t0
            st = pbg.SyncerStub(channel).Status(
                pb.StatusRequest(), timeout=5, metadata=(("authorization", f"Bearer {TOKEN}"),)
            )
        assert st.rejections["missing_token"] == 300
        lines = [e for e in ev.read_events(tmp_path / "events" / "syncer.jsonl") if isinstance(e, ev.Reject)]
        assert len(lines) <= 1 + elapsed / OUTSIDER_LOG_S, (len(lines), elapsed)
    after = [e for e in ev.read_events(tmp_path / "events" / "syncer.jsonl") if isinstance(e, ev.Reject)]
    assert sum(1 + e.repeats for e in after) == 300 and {(e.call, e.reason) for e in after} == {
        ("Status", "missing_token")
    }


def test_a_call_whose_request_never_comes_is_cancelled(tmp_path):
    """A half-open call that got a slot holds it only until its request is overdue (``first_message_s``)."""
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    learner_md = (("authorization", f"Bearer {learner_credential(TOKEN, 'learner-0')}"),)
    release = threading.Event()
    with (
        served_syncer(cfg, tmp_path, token=TOKEN, first_message_s=1.0) as (svc, port),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        try:
            held = [
                _half_open(channel, m, md, release)
                for m, md in (("/diloco.v1.Syncer/Report", learner_md), ("/grpc.health.v1.Health/Check", ()))
            ]
            wait_until(lambda: all(f.done() for f in held), 20, "the half-open calls cancelled")
            assert {f.exception().code() for f in held} == {grpc.StatusCode.CANCELLED}
        finally:
            release.set()


def test_a_flood_of_short_calls_cannot_starve_status(tmp_path):
    """One learner's credential sending Reports back to back from 32 threads (the short calls are not
    rate-limited: docs/security.md says why): an operator's Status + health, polled every 50 ms, keep answering."""
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    learner_md = (("authorization", f"Bearer {learner_credential(TOKEN, 'learner-0')}"),)
    stop = threading.Event()
    with (
        served_syncer(cfg, tmp_path, token=TOKEN) as (svc, port),
        grpc.insecure_channel(f"127.0.0.1:{port}") as flood_channel,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=5.0) as operator,
    ):
        tps = policy_from_config(cfg).tokens_per_step
        flood_stub = pbg.SyncerStub(flood_channel)
        assert flood_stub.Join(
            pb.JoinRequest(learner_id="learner-0", incarnation="i", config_hash=svc.config_hash),
            timeout=10,
            metadata=learner_md,
        ).ok
        sent = Counter[str]()

        def flood() -> None:
            step = 0
            while not stop.is_set():
                step += 1
                try:
                    flood_stub.Report(
                        pb.ReportRequest(
                            learner_id="learner-0", incarnation="i", step=step, tokens=step * tps, step_time_s=PACE
                        ),
                        timeout=10,
                        metadata=learner_md,
                    )
                    sent["ok"] += 1
                except grpc.RpcError as err:
                    sent[err.code().name] += 1

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(32)]
        for t in threads:
            t.start()
        latencies = []
        try:
            wait_until(lambda: sum(sent.values()) > 200, 30, "the flood under way")
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                operator.status()
                assert (
                    health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                    == health_pb2.HealthCheckResponse.SERVING
                )
                latencies.append(time.monotonic() - t0)
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        latencies.sort()
        p99 = percentile(latencies, 0.99)
        print(
            f"short-call flood: {sum(sent.values())} Reports ({dict(sent)}); Status + health median "
            f"{latencies[len(latencies) // 2]:.3f} s, p99 {p99:.3f} s over {len(latencies)} polls"
        )
        assert p99 < 1.0, latencies


def test_a_stalled_upload_is_cancelled_after_the_cap(tmp_path):
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 1, "algorithm.num_fragments": 2})
    release = threading.Event()

    def stalled(header):  # a valid header, then nothing: the stream stays open until the server gives up on it
        yield pb.UploadChunk(header=header)
        release.wait(60)

    with (
        served_syncer(cfg, tmp_path, token=TOKEN, max_call_s=2.0) as (svc, port),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        with SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=10.0) as operator:
            assert operator.join("learner-0", "i", cfg.config_hash()).ok
        tps = policy_from_config(cfg).tokens_per_step
        header, _ = upload_request("learner-0", "i", 0, 0, _update(svc, 0, 0.0), 1, tps)
        try:
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as err:
                pbg.SyncerStub(channel).Upload(
                    stalled(header), timeout=60, metadata=(("authorization", f"Bearer {TOKEN}"),)
                )
            assert err.value.code() == grpc.StatusCode.CANCELLED and time.monotonic() - t0 < 30
        finally:
            release.set()


def test_oversized_or_unprintable_names_are_refused_and_never_copied_whole(cluster):
    svc, client, tps = cluster
    for lid, inc in (("x" * 1_000_000, "inc"), ("rogue\x85", "inc"), ("rogue-0", "")):
        r = client.join(lid, inc, svc.config_hash)
        assert not r.ok and r.reason == "malformed" and len(r.detail) <= 1001, (r.reason, len(r.detail))
    r = client.report(pb.ReportRequest(learner_id="y" * 1_000_000, incarnation="i", step=1, tokens=tps))
    assert not r.ok and len(r.detail) <= 1001
    rejects = [e for e in _events(svc) if isinstance(e, ev.Reject)]
    assert (
        rejects and max(len(e.learner_id) for e in rejects) <= 128 and max(len(e.detail) for e in rejects) <= 1001
    )
    assert set(svc.state.learners) == {"good", "rogue"}
