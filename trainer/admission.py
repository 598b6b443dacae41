"""Fair use of the syncer's workers: long calls are bounded per caller and in total, and never outlive a cap.

gRPC's synchronous server runs each call on a worker thread for the call's
whole life. The long ones — uploads (a client stream), long-polling
GetFragment and GetState (server streams) — could otherwise take every worker:
80 held-open calls starved Status and health. So (issue 16):

- at most ``per_caller`` long calls at once per learner (its credential names
  it; the operator's shared secret is bounded by the total only), and at most
  ``workers − RESERVED_WORKERS`` in total: the reserved workers are always free
  for the short calls — Status, health, Join, Report, Leave;
- a long call over its share is refused at once (RESOURCE_EXHAUSTED, reason
  ``busy``; the learner retries as after any unavailable syncer), never queued;
- no long call lives longer than ``max_call_s``: a stalled upload stream is
  cancelled, whatever deadline its client set (or did not set).

Example:
    >>> s = Slots(total=3, per_caller=1)
    >>> s.enter("a"), s.enter("a"), s.enter("b"), s.enter(OPERATOR), s.enter("c")
    (True, False, True, True, False)
    >>> s.leave("a"); s.enter("c")
    True
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import grpc

from trainer.core.credentials import caller, presented
from trainer.core.reasons import RejectReason

LONG_CALLS = frozenset({"Upload", "GetFragment", "GetState"})
RESERVED_WORKERS = 8  # never taken by long calls: Status, health and the short learner calls always find one
OPERATOR = "operator"  # the shared secret's holder: the controller, launchers, tests
MAX_CALL_S = 120.0  # a long call is cancelled after this (a 30 s long poll, or an upload over a throttled link)


class Slots:
    """Long calls in flight, per caller and in total (thread-safe)."""

    def __init__(self, total: int, per_caller: int) -> None:
        self.total, self.per_caller = total, per_caller
        self._lock = threading.Lock()
        self._by = Counter[str]()

    def enter(self, who: str) -> bool:
        """Take a slot for ``who`` (the operator, trusted, is bounded by the total only)."""
        with self._lock:
            if sum(self._by.values()) >= self.total or (who != OPERATOR and self._by[who] >= self.per_caller):
                return False
            self._by[who] += 1
            return True

    def leave(self, who: str) -> None:
        with self._lock:
            self._by[who] -= 1
            if self._by[who] <= 0:
                del self._by[who]


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Wraps the long calls of ``service`` in :class:`Slots` and a :data:`MAX_CALL_S` cancel timer."""

    def __init__(
        self,
        service: str,
        slots: Slots,
        secret: str | None,
        on_reject: Callable[[str, RejectReason, str], None],
        max_call_s: float = MAX_CALL_S,
    ) -> None:
        self._prefix = f"/{service}/"
        self._slots, self._secret, self._on_reject, self._max_call_s = slots, secret, on_reject, max_call_s

    def _who(self, metadata) -> str:  # noqa: ANN001
        c = caller(self._secret, presented(metadata) or "") if self._secret else None
        return f"learner {c.learner_id}" if c is not None and c.learner_id else OPERATOR

    @contextlib.contextmanager
    def _slot(self, call: str, who: str, context) -> Iterator[None]:  # noqa: ANN001
        if not self._slots.enter(who):
            detail = (
                f"busy: {who} already holds {self._slots.per_caller} long calls, or the syncer "
                f"{self._slots.total}; retry after the ones in flight end"
            )
            self._on_reject(call, RejectReason.BUSY, detail)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, detail)
        timer = threading.Timer(self._max_call_s, context.cancel)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            self._slots.leave(who)

    def intercept_service(self, continuation, details):  # noqa: ANN001
        handler = continuation(details)
        call = details.method.rsplit("/", 1)[-1]
        if handler is None or not details.method.startswith(self._prefix) or call not in LONG_CALLS:
            return handler
        who = self._who(details.invocation_metadata)
        codec = dict(
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
        if handler.request_streaming and not handler.response_streaming:
            inner_su = handler.stream_unary

            def stream_unary(request_iterator, context):  # noqa: ANN001
                with self._slot(call, who, context):
                    return inner_su(request_iterator, context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **codec)
        if handler.response_streaming and not handler.request_streaming:
            inner_us = handler.unary_stream

            def unary_stream(request, context):  # noqa: ANN001
                with self._slot(call, who, context):
                    yield from inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(unary_stream, **codec)
        return handler
