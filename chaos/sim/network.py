"""Each learner's link to the syncer, and the faults that act on it.

A fault adds itself to a link under its id and removes itself on heal, so
overlapping faults compose (two partitions, then one heals: still cut). A cut
direction either *drops* messages silently (a partition: Toxiproxy's
``timeout`` toxic; the caller learns at its RPC deadline, or when the heal
closes the cut connections) or *refuses* them (link down, reset, data limit:
the connection is closed, so the call fails at once).

Example:
    >>> link = Link()
    >>> link.block("f1", "to_syncer")
    >>> link.blocked("to_syncer"), link.blocked("from_syncer")
    ('drop', None)
    >>> link.block("f3", "both", mode="refuse")
    >>> link.blocked("to_syncer")
    'refuse'
    >>> link.heal("f3")
    >>> link.set_rate("f2", "both", 1000)       # KB/s
    >>> round(link.delay("from_syncer", 500_000, base_latency_s=0.0), 3)
    0.5
    >>> link.heal("f1"); link.heal("f2")
    >>> link.blocked("to_syncer") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DIRECTIONS = ("to_syncer", "from_syncer")


def _directions(direction: str) -> tuple[str, ...]:
    return DIRECTIONS if direction == "both" else (direction,)


@dataclass
class Link:
    """The state of one learner ↔ syncer link: blocks, added latency and rate caps per direction, by fault id."""

    blocks: dict[str, dict[str, str]] = field(default_factory=lambda: {d: {} for d in DIRECTIONS})
    latency: dict[str, dict[str, tuple[float, float]]] = field(default_factory=lambda: {d: {} for d in DIRECTIONS})
    rates: dict[str, dict[str, float]] = field(default_factory=lambda: {d: {} for d in DIRECTIONS})
    # When the bytes already sent each way have crossed: a learner's calls share one connection, so a message sent
    # behind an upload waits for it (over a slow link a Report queued behind a fragment arrives after it, as the
    # real learner's reports did behind its 7 s uploads at 500 KB/s).
    queued_until: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0.0))

    def block(self, fault_id: str, direction: str, mode: str = "drop") -> None:
        """Cut ``direction``: ``drop`` messages silently, or ``refuse`` them (the connection is closed)."""
        for d in _directions(direction):
            self.blocks[d][fault_id] = mode

    def add_latency(self, fault_id: str, direction: str, latency_s: float, jitter_s: float) -> None:
        for d in _directions(direction):
            self.latency[d][fault_id] = (latency_s, jitter_s)

    def set_rate(self, fault_id: str, direction: str, rate_kbps: float) -> None:
        for d in _directions(direction):
            self.rates[d][fault_id] = rate_kbps * 1000.0

    def heal(self, fault_id: str) -> None:
        for d in DIRECTIONS:
            self.blocks[d].pop(fault_id, None)
            self.latency[d].pop(fault_id, None)
            self.rates[d].pop(fault_id, None)

    def blocked(self, direction: str) -> str | None:
        """None when open; else ``refuse`` if any cut refuses, else ``drop``."""
        modes = set(self.blocks[direction].values())
        return None if not modes else ("refuse" if "refuse" in modes else "drop")

    def delay(
        self,
        direction: str,
        nbytes: int,
        base_latency_s: float,
        bandwidth_Bps: float = float("inf"),
        rng: np.random.Generator | None = None,
    ) -> float:
        """Seconds for ``nbytes`` to cross in ``direction``: latency (with jitter) plus transfer time."""
        t = base_latency_s
        for lat, jit in self.latency[direction].values():
            t += lat + (float(rng.uniform(-jit, jit)) if jit and rng is not None else 0.0)
        return max(t, 0.0) + self.transfer_s(direction, nbytes, bandwidth_Bps)

    def send(
        self,
        direction: str,
        nbytes: int,
        now: float,
        base_latency_s: float,
        bandwidth_Bps: float = float("inf"),
        rng: np.random.Generator | None = None,
    ) -> tuple[float, float]:
        """Send ``nbytes`` at ``now`` behind whatever is still crossing that way: (seconds until its first byte
        arrives, seconds until its last does).

        >>> link = Link()
        >>> link.set_rate("bw", "to_syncer", 100)         # 100 KB/s
        >>> link.send("to_syncer", 300_000, now=0.0, base_latency_s=0.0)      # an upload: 3 s
        (0.0, 3.0)
        >>> link.send("to_syncer", 1_000, now=1.0, base_latency_s=0.0)        # a report sent 1 s in waits for it
        (2.0, 2.01)
        >>> link.drain(now=1.5); link.send("to_syncer", 1_000, now=1.5, base_latency_s=0.0)  # connections reset
        (0.0, 0.01)
        """
        transfer = self.transfer_s(direction, nbytes, bandwidth_Bps)
        wait = max(self.queued_until[direction] - now, 0.0)
        self.queued_until[direction] = now + wait + transfer
        first = wait + self.delay(direction, 0, base_latency_s, bandwidth_Bps, rng)
        return first, first + transfer

    def drain(self, now: float) -> None:
        """The link's connections were closed: nothing sent before ``now`` is still queued."""
        for d in DIRECTIONS:
            self.queued_until[d] = min(self.queued_until[d], now)

    def transfer_s(self, direction: str, nbytes: int, bandwidth_Bps: float = float("inf")) -> float:
        """The part of :meth:`delay` that the bytes take after the first one arrives (the rate caps)."""
        rate = min([bandwidth_Bps, *self.rates[direction].values()])
        return nbytes / rate if np.isfinite(rate) else 0.0
