"""A call's deadline by the bytes it carries: a slow link's call lives as long as its body needs to cross it.

The long poll's ``wait_s``, then ``timeout_s`` for the call itself and for each piece (``chunk_bytes``) of its
body, so the slowest link a call survives is one piece per ``timeout_s`` (256 KiB per 10 s: ~26 KB/s); a link that
carries nothing is found sooner by gRPC's keepalive. A fixed deadline (before: ``timeout_s`` + 1 s per MB for an
upload, ``wait_s`` + ``timeout_s`` for a fragment) failed every call slower than its guess: over 500 KB/s links
four fragments fetched at once took ~27 s each, every retry started over, and synchronous DiLoCo, which syncs every
fragment at once, stopped training. The gRPC client (trainer.client) and deterministic mode (chaos.sim) both set
their calls' deadlines here.

Example (256 KiB pieces, trainer.wire.CHUNK_BYTES):
    >>> piece = 256 * 1024
    >>> deadline_s(10.0, 0, piece), deadline_s(10.0, 66_560, piece), deadline_s(10.0, 3_407_872, piece)
    (10.0, 20.0, 140.0)
    >>> deadline_s(10.0, 1, piece, wait_s=2.0), state_deadline_s(10.0, 447_488, piece)
    (22.0, 30.0)
"""

from __future__ import annotations


def deadline_s(timeout_s: float, nbytes: int, chunk_bytes: int, wait_s: float = 0.0) -> float:
    """``wait_s``, then ``timeout_s`` for the call and for each ``chunk_bytes`` piece of its ``nbytes`` body."""
    return wait_s + timeout_s * (1 + -(-nbytes // chunk_bytes))


def state_deadline_s(timeout_s: float, nbytes: int, chunk_bytes: int) -> float:
    """A whole state's fetch: :func:`deadline_s`, and never less than the three timeouts it always had."""
    return max(3 * timeout_s, deadline_s(timeout_s, nbytes, chunk_bytes))
