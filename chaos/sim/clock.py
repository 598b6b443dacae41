"""A discrete-event loop on a virtual clock: the simulator's only notion of time.

Callbacks run in time order; ties run in the order they were scheduled, so a
run is a pure function of its inputs (no threads, no wall clock).

Example:
    >>> loop = EventLoop()
    >>> seen = []
    >>> _ = loop.after(2.0, seen.append, "b")
    >>> _ = loop.after(1.0, seen.append, "a")
    >>> t = loop.after(1.5, seen.append, "never")
    >>> t.cancel()
    >>> loop.run(until=10.0)
    >>> seen, loop.now
    (['a', 'b'], 2.0)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timer:
    """A scheduled callback; :meth:`cancel` keeps it from running."""

    when: float
    seq: int  # ties in ``when`` run in scheduling order
    fn: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False, default=())
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        self.cancelled = True


class EventLoop:
    """Virtual time starting at ``start`` seconds; :meth:`run` advances it event by event."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, Timer]] = []  # (when, seq, timer): compared as tuples, in C
        self._seq = 0
        self.stopped = False
        self.handled = 0

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> Timer:
        self._seq += 1
        t = Timer(max(when, self.now), self._seq, fn, args)
        heapq.heappush(self._heap, (t.when, t.seq, t))
        return t

    def after(self, delay: float, fn: Callable[..., Any], *args: Any) -> Timer:
        return self.at(self.now + max(delay, 0.0), fn, *args)

    def stop(self) -> None:
        self.stopped = True

    def run(self, until: float) -> None:
        """Run callbacks until none is left, :meth:`stop` is called, or the clock would pass ``until``."""
        while self._heap and not self.stopped:
            t = self._heap[0][2]
            if t.when > until:
                self.now = until
                return
            heapq.heappop(self._heap)
            if t.cancelled:
                continue
            self.now = t.when
            self.handled += 1
            t.fn(*t.args)
