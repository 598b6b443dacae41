"""The syncer's gRPC client: deadlines on every call, keepalive, retries with backoff, auth metadata.

A call that carries a body has a deadline by its size (trainer.core.deadlines): a slow link takes as long as it
needs, down to a floor of one piece (``CHUNK_BYTES``) per ``timeout_s``; a dead link is found sooner by keepalive.

Used by learners, by tests speaking the real protocol, and by the chaos
controller to read status. Retries cover transient transport failures
(UNAVAILABLE, DEADLINE_EXCEEDED, and RESOURCE_EXHAUSTED: a long call over this
learner's share, trainer.admission) only; a refusal with a reason is an answer,
not a failure, and is returned as such.

Example:
    client = SyncClient("127.0.0.1:50051", token="s3cret")
    reply = client.status()
    print(reply.versions)
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc
import numpy as np

from trainer.core import wire_formats
from trainer.core.deadlines import deadline_s, state_deadline_s
from trainer.errors import ProtocolError, SyncerUnavailable
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg
from trainer.wire import CHUNK_BYTES, Assembler, Spec, crc32, decode_tensors, encode_tensors, split_chunks

T = TypeVar("T")

KEEPALIVE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect quickly after a partition heals instead of gRPC's default 20 s+ backoff.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0

    def delays(self, rng: random.Random) -> Iterator[float]:
        d = self.initial_backoff_s
        for _ in range(self.attempts - 1):
            yield d * (0.5 + rng.random())  # jitter so learners don't retry in lockstep
            d = min(d * 2, self.max_backoff_s)


def fragment_nbytes(shapes: Mapping[str, Sequence[int]]) -> int:
    """The bytes of a fragment (or of the whole state) as the syncer sends it: float32.

    >>> fragment_nbytes({"w": (3, 4), "b": (4,)})
    64
    """
    return sum(wire_formats.nbytes("float32", math.prod(shape)) for shape in shapes.values())


@dataclass(frozen=True)
class FragmentValue:
    fragment: int
    version: int
    tensors: dict[str, np.ndarray]


def specs_to_pb(specs: Sequence[Spec]) -> list[pb.TensorSpec]:
    return [pb.TensorSpec(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs]


def specs_from_pb(specs: Sequence[pb.TensorSpec]) -> list[Spec]:
    return [Spec(s.name, tuple(int(d) for d in s.shape), s.dtype) for s in specs]


def upload_request(
    learner_id: str,
    incarnation: str,
    fragment: int,
    base_version: int,
    tensors: Mapping[str, np.ndarray],
    c_steps: int,
    c_tokens: int,
    learner_step: int = 0,
    round: int = 0,
    wire_format: str = "float32",
) -> tuple[pb.UploadHeader, bytes]:
    """An upload's header and payload (:func:`upload_messages` streams them), ``tensors`` in ``wire_format``."""
    specs, payload = encode_tensors(tensors, fmt=wire_format)
    header = pb.UploadHeader(
        learner_id=learner_id,
        incarnation=incarnation,
        fragment=fragment,
        base_version=base_version,
        c_steps=c_steps,
        c_tokens=c_tokens,
        tensors=specs_to_pb(specs),
        total_bytes=len(payload),
        crc32=crc32(payload),
        learner_step=learner_step,
        round=round,
    )
    return header, payload


def upload_messages(
    header: pb.UploadHeader, payload: bytes, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[pb.UploadChunk]:
    yield pb.UploadChunk(header=header)
    for off, data in split_chunks(payload, chunk_bytes):
        yield pb.UploadChunk(data=pb.DataChunk(offset=off, data=data))


def read_fragments(stream: Iterator[pb.FragmentChunk], max_bytes: int = 1 << 31) -> list[FragmentValue]:
    """Parse a stream of (header, chunks...) groups into fragment values, checking CRCs."""
    out: list[FragmentValue] = []
    header: pb.FragmentHeader | None = None
    asm: Assembler | None = None

    def close() -> None:
        if header is not None and asm is not None:
            specs = asm.specs
            out.append(FragmentValue(header.fragment, header.version, decode_tensors(specs, asm.finish())))

    for msg in stream:
        if msg.HasField("header"):
            close()
            header = msg.header
            asm = Assembler(specs_from_pb(header.tensors), header.total_bytes, header.crc32, max_bytes)
        elif asm is None:
            raise ProtocolError("fragment data arrived before its header")
        else:
            asm.add(msg.data.offset, msg.data.data)
    close()
    return out


class _AuthPlugin(grpc.AuthMetadataPlugin):
    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, context, callback) -> None:  # noqa: ANN001 - gRPC's signature
        callback((("authorization", f"Bearer {self._token}"),), None)


class SyncClient:
    """Typed calls to the syncer over one channel."""

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = RetryPolicy(),
        tls_ca: str | None = None,
        seed: int = 0,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry
        self._rng = random.Random(seed)
        if tls_ca:
            creds = grpc.ssl_channel_credentials(root_certificates=open(tls_ca, "rb").read())
            if token:
                creds = grpc.composite_channel_credentials(
                    creds, grpc.metadata_call_credentials(_AuthPlugin(token))
                )
            self._channel = grpc.secure_channel(address, creds, options=KEEPALIVE_OPTIONS)
            self._metadata: tuple[tuple[str, str], ...] = ()
        else:
            self._channel = grpc.insecure_channel(address, options=KEEPALIVE_OPTIONS)
            self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.stub = pbg.SyncerStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- retry wrapper ---------------------------------------------------
    def call(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` retrying transient transport errors; raise SyncerUnavailable when out of attempts."""
        last: grpc.RpcError | None = None
        delays = self.retry.delays(self._rng)
        while True:
            try:
                return fn()
            except grpc.RpcError as err:
                if err.code() not in RETRYABLE:
                    raise
                last = err
            delay = next(delays, None)
            if delay is None:
                raise SyncerUnavailable(
                    f"{what} to {self.address} failed after {self.retry.attempts} attempts: "
                    f"{last.code().name}: {last.details()}"
                ) from last
            time.sleep(delay)

    # ---- calls -----------------------------------------------------------
    def join(self, learner_id: str, incarnation: str, config_hash: str) -> pb.JoinReply:
        req = pb.JoinRequest(learner_id=learner_id, incarnation=incarnation, config_hash=config_hash)
        return self.call(lambda: self.stub.Join(req, timeout=self.timeout_s, metadata=self._metadata), "Join")

    def leave(self, learner_id: str, incarnation: str, why: str) -> pb.LeaveReply:
        req = pb.LeaveRequest(learner_id=learner_id, incarnation=incarnation, why=why)
        return self.call(lambda: self.stub.Leave(req, timeout=self.timeout_s, metadata=self._metadata), "Leave")

    def report(self, req: pb.ReportRequest) -> pb.ReportReply:
        return self.call(lambda: self.stub.Report(req, timeout=self.timeout_s, metadata=self._metadata), "Report")

    def status(self) -> pb.StatusReply:
        return self.call(
            lambda: self.stub.Status(pb.StatusRequest(), timeout=self.timeout_s, metadata=self._metadata), "Status"
        )

    def upload(
        self,
        learner_id: str,
        incarnation: str,
        fragment: int,
        base_version: int,
        tensors: Mapping[str, np.ndarray],
        c_steps: int,
        c_tokens: int,
        learner_step: int = 0,
        chunk_bytes: int = CHUNK_BYTES,
        round: int = 0,
        wire_format: str = "float32",
    ) -> pb.UploadReply:
        """Upload one fragment (idempotent: safe to retry)."""
        header, payload = upload_request(
            learner_id,
            incarnation,
            fragment,
            base_version,
            tensors,
            c_steps,
            c_tokens,
            learner_step,
            round,
            wire_format,
        )
        timeout = deadline_s(self.timeout_s, len(payload), chunk_bytes)
        return self.call(
            lambda: self.stub.Upload(
                upload_messages(header, payload, chunk_bytes), timeout=timeout, metadata=self._metadata
            ),
            "Upload",
        )

    def get_fragment(
        self, learner_id: str, fragment: int, min_version: int, wait_s: float, nbytes: int = 0
    ) -> FragmentValue:
        """The global value of a fragment once its version reaches ``min_version`` (or after ``wait_s``); ``nbytes``:
        its size (:func:`fragment_nbytes`), which sets the deadline."""
        req = pb.FragmentRequest(learner_id=learner_id, fragment=fragment, min_version=min_version, wait_s=wait_s)
        timeout = deadline_s(self.timeout_s, nbytes, CHUNK_BYTES, wait_s)

        def once() -> FragmentValue:
            stream = self.stub.GetFragment(req, timeout=timeout, metadata=self._metadata)
            vals = read_fragments(stream)
            if len(vals) != 1:
                raise ProtocolError(f"GetFragment returned {len(vals)} fragments, expected 1")
            return vals[0]

        return self.call(once, "GetFragment")

    def get_state(self, learner_id: str, nbytes: int = 0) -> list[FragmentValue]:
        """Every fragment's current global value (a joining learner's starting point); ``nbytes``: the state's
        size (:func:`fragment_nbytes`), which sets the deadline (at least three ``timeout_s``)."""
        req = pb.StateRequest(learner_id=learner_id)
        timeout = state_deadline_s(self.timeout_s, nbytes, CHUNK_BYTES)
        return self.call(
            lambda: read_fragments(self.stub.GetState(req, timeout=timeout, metadata=self._metadata)),
            "GetState",
        )
