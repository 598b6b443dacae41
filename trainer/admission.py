"""Fair use of the syncer's workers: every call is bounded per caller and in total, and none waits on a worker.

gRPC's synchronous server runs each call on a worker thread for the call's
whole life, and a call whose request is unary holds its worker from its headers
until its message arrives: 100 calls opened and never sent, without any
credential, stopped Status and health from answering (docs/security.md,
invariant ``capacity``). So every call of every service (health included):

- is served by a handler that reads its own request: the worker is taken into
  a pool at once, and a request that has not arrived ``first_message_s`` after
  the headers cancels the call;
- takes a slot of one pool by who calls it: **long** calls (uploads, long-polling
  GetFragment, GetState) at most ``num_fragments + 4`` per learner credential;
  **short** ones (Join, Report, Leave, Status, health with a credential) at most
  :data:`SHORT_PER_CALLER` per learner credential, with :data:`OPERATOR_SHORT`
  slots the learners cannot take; calls with **no** valid credential (health
  probes; every other call without one is refused at once, trainer.syncer) at
  most :data:`ANONYMOUS_CALLS` together. The operator (the shared secret) is
  bounded by each pool's total only;
- is refused at once when its pool is full (RESOURCE_EXHAUSTED, reason ``busy``;
  a learner's client retries with backoff), never queued;
- lives at most ``max_call_s``: a stalled call is cancelled whatever deadline its
  client set (or did not set).

The pools' totals add up to the server's workers (:func:`worker_budget`), so a
call that gets a slot always gets a worker, and no caller can take another's.

Example:
    >>> s = Slots(total=3, per_caller=1)
    >>> s.enter("a"), s.enter("a"), s.enter("b"), s.enter(OPERATOR), s.enter("c")
    (True, False, True, True, False)
    >>> s.leave("a"); s.enter("c")
    True
    >>> worker_budget(num_learners=4, num_fragments=4, at_least=64)
    Budget(workers=64, long=36, short=24, anonymous=4, reserved=28)
"""

from __future__ import annotations

import contextlib
import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

from trainer.core.credentials import caller, presented
from trainer.core.reasons import RejectReason

LONG_CALLS = frozenset({"Upload", "GetFragment", "GetState"})
SHORT_PER_CALLER = 4  # a learner makes one short call at a time; four leave room for retries that overlap
OPERATOR_SHORT = 8  # short-call slots only the operator's Status, health and calls can take
ANONYMOUS_CALLS = 4  # calls without a credential (health probes) in flight at once, all such callers together
OPERATOR = "operator"  # the shared secret's holder: the controller, launchers, tests
ANONYMOUS = "anonymous"  # no valid credential
MAX_CALL_S = 120.0  # a call is cancelled after this (a 30 s long poll, or an upload over a throttled link)
FIRST_MESSAGE_S = 10.0  # a call's request must arrive this soon after its headers


class Budget(NamedTuple):
    """The server's workers and the pools they are split into (``reserved``: those long calls cannot take)."""

    workers: int
    long: int
    short: int
    anonymous: int
    reserved: int


def worker_budget(num_learners: int, num_fragments: int, at_least: int = 0) -> Budget:
    """Workers for every learner's long calls (one long poll per fragment, an upload, a state fetch, and slack) and
    short calls, the operator's own short slots and the anonymous ones; spare workers (``at_least``) go to the long
    calls (the operator's, bounded by the total only)."""
    short = num_learners * SHORT_PER_CALLER + OPERATOR_SHORT
    reserved = short + ANONYMOUS_CALLS
    long = max(num_learners * (num_fragments + 4), at_least - reserved)
    return Budget(long + reserved, long, short, ANONYMOUS_CALLS, reserved)


class Slots:
    """Calls in flight, per caller and in total (thread-safe)."""

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

    def in_flight(self) -> int:
        """Calls holding a slot now (each holds a worker until its handler returns)."""
        with self._lock:
            return sum(self._by.values())


class Deadlines:
    """Calls to cancel at their deadlines, on one watchdog thread (a timer thread per call cost two thread starts
    per RPC). ``add`` returns a handle; ``discard`` it when the call ends in time.

    >>> import time
    >>> d, fired = Deadlines(), []
    >>> h = d.add(0.0, lambda: fired.append("late")); k = d.add(60.0, lambda: fired.append("never"))
    >>> d.discard(k); time.sleep(0.2); fired
    ['late']
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._live: set[int] = set()
        self._next = 0
        self._thread: threading.Thread | None = None

    def add(self, after_s: float, fire: Callable[[], Any]) -> int:
        with self._cond:
            self._next += 1
            heapq.heappush(self._heap, (time.monotonic() + after_s, self._next, fire))
            self._live.add(self._next)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="call-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
            return self._next

    def discard(self, handle: int) -> None:
        with self._cond:
            self._live.discard(handle)
            if len(self._heap) > 2 * len(self._live) + 64:  # ended calls' entries (and their contexts) go now
                self._heap = [e for e in self._heap if e[1] in self._live]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)  # ended in time
                if not self._heap:
                    self._cond.wait()
                    continue
                at, handle, fire = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(handle)
            fire()  # outside the lock: a cancel may call back into gRPC


@dataclass(frozen=True)
class Pools:
    long: Slots
    short: Slots
    anonymous: Slots

    def in_flight(self) -> dict[str, int]:
        """Calls holding a worker now, by pool."""
        return {
            "long": self.long.in_flight(),
            "short": self.short.in_flight(),
            "anonymous": self.anonymous.in_flight(),
        }

    @classmethod
    def of(cls, budget: Budget, num_fragments: int) -> Pools:
        return cls(
            Slots(budget.long, num_fragments + 4),
            Slots(budget.short, SHORT_PER_CALLER),
            Slots(budget.anonymous, budget.anonymous),
        )


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Serves every call of every service through a slot of its pool, with a first-message and a call timer."""

    def __init__(
        self,
        service: str,
        pools: Pools,
        secret: str | None,
        on_reject: Callable[[str, RejectReason, str], None],
        max_call_s: float = MAX_CALL_S,
        first_message_s: float = FIRST_MESSAGE_S,
    ) -> None:
        self._prefix = f"/{service}/"
        self._pools, self._secret, self._on_reject = pools, secret, on_reject
        self._max_call_s, self._first_message_s = max_call_s, first_message_s
        self._deadlines = Deadlines()

    def _who(self, metadata) -> str:  # noqa: ANN001
        if not self._secret:
            return OPERATOR  # no auth (tests only): everyone is trusted
        c = caller(self._secret, presented(metadata) or "")
        if c is None:
            return ANONYMOUS
        return f"learner {c.learner_id}" if c.learner_id else OPERATOR

    def _pool(self, method: str, who: str) -> Slots:
        if who == ANONYMOUS:
            return self._pools.anonymous
        long = method.startswith(self._prefix) and method.rsplit("/", 1)[-1] in LONG_CALLS
        return self._pools.long if long else self._pools.short

    @contextlib.contextmanager
    def _slot(self, call: str, who: str, pool: Slots, context) -> Iterator[None]:  # noqa: ANN001
        if not pool.enter(who):
            detail = (
                f"busy: {who} already holds {pool.per_caller} such calls, or the syncer {pool.total}; retry "
                "after the ones in flight end"
            )
            if who != ANONYMOUS:  # an outsider's refusals are not logged one by one (docs/security.md, output)
                self._on_reject(call, RejectReason.BUSY, detail)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, detail)
        deadline = self._deadlines.add(self._max_call_s, context.cancel)
        try:
            yield
        finally:
            self._deadlines.discard(deadline)
            pool.leave(who)

    def _first(self, requests: Iterator[Any], context) -> Any:  # noqa: ANN001
        """The call's one request, or the call cancelled when it has not come within ``first_message_s``."""
        deadline = self._deadlines.add(self._first_message_s, context.cancel)
        try:
            return next(requests)
        except StopIteration:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without its request message")
        finally:
            self._deadlines.discard(deadline)

    def intercept_service(self, continuation, details):  # noqa: ANN001
        handler = continuation(details)
        if handler is None:
            return None
        call = details.method.rsplit("/", 1)[-1]
        who = self._who(details.invocation_metadata)
        pool = self._pool(details.method, who)
        slot, first = self._slot, self._first
        codec = dict(
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
        # Every handler reads its own request (request-streaming): the worker is in a pool from the headers on.
        if not handler.request_streaming and not handler.response_streaming:
            inner_uu = handler.unary_unary

            def unary_unary(requests, context):  # noqa: ANN001
                with slot(call, who, pool, context):
                    return inner_uu(first(requests, context), context)

            return grpc.stream_unary_rpc_method_handler(unary_unary, **codec)
        if not handler.request_streaming:
            inner_us = handler.unary_stream

            def unary_stream(requests, context):  # noqa: ANN001
                with slot(call, who, pool, context):
                    yield from inner_us(first(requests, context), context)

            return grpc.stream_stream_rpc_method_handler(unary_stream, **codec)
        if not handler.response_streaming:
            inner_su = handler.stream_unary

            def stream_unary(requests, context):  # noqa: ANN001
                with slot(call, who, pool, context):
                    return inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **codec)
        inner_ss = handler.stream_stream

        def stream_stream(requests, context):  # noqa: ANN001
            with slot(call, who, pool, context):
                yield from inner_ss(requests, context)

        return grpc.stream_stream_rpc_method_handler(stream_stream, **codec)
