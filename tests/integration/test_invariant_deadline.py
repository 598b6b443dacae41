"""Invariant ``deadline`` (docs/security.md): no call outlives the server's cap, whatever its caller does.

Hypothesis draws a set of calls opened together on a real syncer (cap ``CAP_S``, request due ``FIRST_S`` after the
headers) by two learners' credentials, the operator and a caller with none: uploads that send a valid header and
some of their data and then stall, calls of any method opened and never sent, long polls for a version that never
comes with any ``wait_s`` (NaN, infinite, negative, 10¹⁸ included), state fetches whose caller stops reading, each
with no client deadline or a 10-minute one. The property: every call has ended — answered, refused or cancelled
by the server — within ``CAP_S`` + ``SLACK_S`` of its start, the server holds none of them (its pools count the
calls holding a worker, ``SyncerService.pools``: a client that stops reading learns its call's end only when it
reads on), and the learners' next calls are served. Its negative control removes the server's timers (``Deadlines.add`` schedules nothing): a stalled
upload then outlives the cap.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.pytest_plugin import chaos_examples, chaos_settings
from tests.support import served_syncer, tiny_config
from trainer import admission
from trainer.client import upload_messages, upload_request
from trainer.core.credentials import learner_credential
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg

pytestmark = pytest.mark.integration

TOKEN = "deadline-test-token"
LEARNERS = ("learner-0", "learner-1")
CAP_S = 2.0  # the server's cap on a call (MAX_CALL_S is 120 s in production: the same code, a shorter wait)
FIRST_S = 1.0  # a call's request must arrive this soon after its headers
SLACK_S = 3.0  # the watchdog's wake-up and the cancellation's trip on a loaded 2-core machine
CLIENT_DEADLINE = (None, 600.0)  # a caller that sets none, or one far beyond the cap
HALF_OPEN_METHODS = (
    "/diloco.v1.Syncer/Upload",
    "/diloco.v1.Syncer/GetFragment",
    "/diloco.v1.Syncer/GetState",
    "/diloco.v1.Syncer/Report",
    "/diloco.v1.Syncer/Status",
    "/grpc.health.v1.Health/Check",
)


OUTCOMES: Counter[str] = Counter()  # how the calls ended, by kind: printed at the end (most must be cancellations)


@dataclass(frozen=True)
class Stall:
    """One call that does its best to live forever."""

    kind: str  # "upload", "half_open", "long_poll" or "state_unread"
    sender: str  # a learner id, "operator" or "anonymous"
    client_deadline: float | None
    chunks: int = 0  # upload: data chunks sent before the stall
    method: str = ""  # half_open: the method
    wait_s: float = 0.0  # long_poll: the wait it asks for
    read: int = 0  # state_unread: messages read before it stops reading


SENDERS = st.sampled_from((*LEARNERS, "operator", "anonymous"))
DEADLINES = st.sampled_from(CLIENT_DEADLINE)
STALLS = st.one_of(
    st.builds(Stall, kind=st.just("upload"), sender=SENDERS, client_deadline=DEADLINES, chunks=st.integers(0, 3)),
    st.builds(
        Stall,
        kind=st.just("half_open"),
        sender=SENDERS,
        client_deadline=DEADLINES,
        method=st.sampled_from(HALF_OPEN_METHODS),
    ),
    st.builds(
        Stall,
        kind=st.just("long_poll"),
        sender=SENDERS,
        client_deadline=DEADLINES,
        wait_s=st.sampled_from([math.nan, math.inf, -1.0, 1e18, 29.0, 30.0, 31.0]),
    ),
    st.builds(
        Stall, kind=st.just("state_unread"), sender=SENDERS, client_deadline=DEADLINES, read=st.integers(0, 1)
    ),
)


def _metadata(sender: str) -> tuple[tuple[str, str], ...]:
    if sender == "anonymous":
        return ()
    secret = TOKEN if sender == "operator" else learner_credential(TOKEN, sender)
    return (("authorization", f"Bearer {secret}"),)


class Calls:
    """The drawn calls, opened on one connection of their own, each with the moment it started and ended."""

    def __init__(self, port: int, svc) -> None:  # noqa: ANN001
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pbg.SyncerStub(self.channel)
        self.svc = svc
        self.release = threading.Event()
        self.started: list[float] = []
        self.calls: list[grpc.Future] = []
        self.readers: list[threading.Thread] = []

    def _stalled_upload(self, s: Stall) -> Iterator[pb.UploadChunk]:
        lid = s.sender if s.sender in LEARNERS else LEARNERS[0]
        names = self.svc.fragments[0].names
        tps = policy_from_config(self.svc.cfg).tokens_per_step
        zeros = {n: np.zeros_like(self.svc.state.params[n]) for n in names}
        header, payload = upload_request(lid, f"inc-{lid}", 0, 0, zeros, 1, tps)
        yield from islice(upload_messages(header, payload, max(len(payload) // 8, 1)), 1 + s.chunks)
        self.release.wait()

    def _never(self) -> Iterator[bytes]:
        self.release.wait()
        return
        yield

    def open(self, s: Stall) -> None:
        md, t = _metadata(s.sender), s.client_deadline
        self.started.append(time.monotonic())
        if s.kind == "upload":
            call = self.stub.Upload.future(self._stalled_upload(s), timeout=t, metadata=md)
        elif s.kind == "half_open":
            raw = self.channel.stream_unary(
                s.method, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            call = raw.future(self._never(), timeout=t, metadata=md)
        elif s.kind == "long_poll":
            lid = s.sender if s.sender in LEARNERS else LEARNERS[0]
            req = pb.FragmentRequest(learner_id=lid, fragment=0, min_version=10**12, wait_s=s.wait_s)
            call = self.stub.GetFragment(req, timeout=t, metadata=md)
            self._read(call, math.inf)
        else:
            lid = s.sender if s.sender in LEARNERS else LEARNERS[0]
            call = self.stub.GetState(pb.StateRequest(learner_id=lid), timeout=t, metadata=md)
            self._read(call, s.read)
        self.calls.append(call)

    def _read(self, stream, n: float) -> None:  # noqa: ANN001
        """Read ``n`` messages of a response stream on a thread of its own, then stop reading."""

        def read() -> None:
            try:
                for k, _ in enumerate(stream, 1):
                    if k >= n:
                        return
            except grpc.RpcError:
                pass

        t = threading.Thread(target=read, daemon=True)
        t.start()
        self.readers.append(t)

    def late(self, bound_s: float, stalls: list[Stall]) -> list[str]:
        """What outlived ``bound_s``: each call its client can see end (all but a state fetch it stopped reading)
        still open ``bound_s`` after its start, and any call the server still holds ``bound_s`` after the last one
        started (counted by the pools themselves: a call holds a worker and a slot from its headers until its
        handler returns, whatever its client has yet to read)."""
        assert self.svc.pools is not None
        out = []
        for s, call, t0 in zip(stalls, self.calls, self.started, strict=True):
            if s.kind == "state_unread":
                continue
            while not call.done() and time.monotonic() < t0 + bound_s:
                time.sleep(0.02)
            if not call.done():
                out.append(f"{s} still open")
            else:
                err = call.exception()
                OUTCOMES[f"{s.kind}: {err.code().name if err is not None else 'answered'}"] += 1
        end = self.started[-1] + bound_s
        while sum(self.svc.pools.in_flight().values()) and time.monotonic() < end:
            time.sleep(0.02)
        held = {k: n for k, n in self.svc.pools.in_flight().items() if n}
        return out + ([f"the server holds {held}"] if held else [])

    def close(self) -> None:
        self.release.set()
        for c in self.calls:
            c.cancel()
        for t in self.readers:
            t.join(10)
        self.channel.close()


@pytest.fixture(scope="module")
def syncer(tmp_path_factory):
    cfg = tiny_config(**{"token_budget": 10**12, "algorithm.num_learners": 2, "algorithm.num_fragments": 2})
    with served_syncer(
        cfg, tmp_path_factory.mktemp("deadline"), token=TOKEN, max_call_s=CAP_S, first_message_s=FIRST_S
    ) as (svc, port):
        stub_channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pbg.SyncerStub(stub_channel)
        for lid in LEARNERS:
            r = stub.Join(
                pb.JoinRequest(learner_id=lid, incarnation=f"inc-{lid}", config_hash=svc.config_hash),
                timeout=10,
                metadata=_metadata(lid),
            )
            assert r.ok, r
        yield svc, port, stub
        stub_channel.close()
    print("\ndeadline: how the generated calls ended:", dict(OUTCOMES.most_common()))


@pytest.mark.nightly_sized  # the profile's examples
@chaos_settings(examples=max(chaos_examples() // 2, 1))
@given(stalls=st.lists(STALLS, min_size=1, max_size=6))
def test_no_call_outlives_the_cap(syncer, stalls) -> None:
    svc, port, stub = syncer
    calls = Calls(port, svc)
    try:
        for s in stalls:
            calls.open(s)
        late = calls.late(CAP_S + SLACK_S, stalls)
        assert not late, f"past the cap and {SLACK_S} s: {late}"
    finally:
        calls.close()
    for lid in LEARNERS:  # every slot came back: the learners' next calls are served
        r = stub.Join(
            pb.JoinRequest(learner_id=lid, incarnation=f"inc-{lid}", config_hash=svc.config_hash),
            timeout=10,
            metadata=_metadata(lid),
        )
        assert r.ok, r


def test_deadline_negative_control(syncer, monkeypatch) -> None:
    """With the server's timers removed, a stalled upload outlives the cap (and so would fail the property)."""
    monkeypatch.setattr(admission.Deadlines, "add", lambda self, after_s, fire: 0)
    svc, port, _ = syncer
    calls = Calls(port, svc)
    try:
        stall = Stall("upload", LEARNERS[1], None, chunks=1)
        calls.open(stall)
        assert calls.late(CAP_S + SLACK_S, [stall]) == [f"{stall} still open", "the server holds {'long': 1}"]
    finally:
        calls.close()
