"""Tensors on the wire: raw little-endian bytes, chunked, CRC-32 checked. No pickle.

A payload is the tensors of one fragment concatenated in a given name order.
It travels as a header (names, shapes, dtypes, total bytes, CRC-32) followed
by :class:`DataChunk`-sized pieces of at most ``CHUNK_BYTES`` each, so no gRPC
message comes near the 4 MiB default limit. :class:`Assembler` rebuilds a
payload and refuses duplicates, gaps, overflow, truncation and bad checksums
with a :class:`~trainer.core.reasons.Rejected` naming the problem.

Example:
    >>> import numpy as np
    >>> specs, payload = encode_tensors({"w": np.arange(3, dtype=np.float32)})
    >>> a = Assembler(specs, len(payload), crc32(payload), max_bytes=1 << 20)
    >>> for off, data in split_chunks(payload, 8):
    ...     a.add(off, data)
    >>> decode_tensors(specs, a.finish())["w"].tolist()
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trainer.core import wire_formats
from trainer.core.reasons import Rejected, RejectReason

# 256 KiB: far below gRPC's 4 MiB default message limit, and each piece that arrives shows the syncer its learner
# alive (trainer.core.syncer_records.LearnerRecord.heard_at): one crosses a 52 KB/s link within the 5 s liveness
# timeout, where a 1 MiB one needed 210 KB/s.
CHUNK_BYTES = 1 << 18
ALLOWED_DTYPES = wire_formats.FORMATS  # a tensor's dtype on the wire is its format (trainer.core.wire_formats)


@dataclass(frozen=True)
class Spec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        # Exact (Python ints): a hostile header's int64 dimensions must not wrap a 64-bit product to a small size.
        return wire_formats.nbytes(self.dtype, math.prod(self.shape))


def crc32(data: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode_tensors(
    tensors: Mapping[str, np.ndarray], order: Sequence[str] | None = None, fmt: wire_formats.Format = "float32"
) -> tuple[list[Spec], bytes]:
    """Specs and the concatenated bytes of ``tensors`` (sorted names by default), each in wire format ``fmt``."""
    names = list(order) if order is not None else sorted(tensors)
    specs, parts = [], []
    for n in names:
        x = np.asarray(tensors[n])
        specs.append(Spec(n, tuple(int(d) for d in x.shape), fmt))
        parts.append(wire_formats.encode(x, fmt))
    return specs, b"".join(parts)


def validate_specs(specs: Sequence[Spec]) -> None:
    seen: set[str] = set()
    for s in specs:
        if not s.name:
            raise Rejected(RejectReason.MALFORMED, "a tensor spec has an empty name")
        if s.name in seen:
            raise Rejected(RejectReason.MALFORMED, f"tensor {s.name!r} appears twice in the header")
        seen.add(s.name)
        if s.dtype not in ALLOWED_DTYPES:
            raise Rejected(
                RejectReason.BAD_DTYPE,
                f"tensor {s.name!r} has dtype {s.dtype!r}; only {ALLOWED_DTYPES} are accepted",
            )
        if any(d < 0 for d in s.shape):
            raise Rejected(RejectReason.BAD_SHAPE, f"tensor {s.name!r} has a negative dimension {s.shape}")


def decode_tensors(specs: Sequence[Spec], payload: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`encode_tensors`: writable fp32 arrays, whatever each tensor's wire format."""
    out: dict[str, np.ndarray] = {}
    offset = 0
    for s in specs:
        n = s.nbytes
        if offset + n > len(payload):
            raise Rejected(RejectReason.TRUNCATED, f"payload ends inside tensor {s.name!r}")
        out[s.name] = wire_formats.decode(memoryview(payload)[offset : offset + n], s.dtype, s.shape)
        offset += n
    if offset != len(payload):
        raise Rejected(RejectReason.OVERSIZE, f"payload has {len(payload) - offset} bytes beyond its tensors")
    return out


def split_chunks(payload: bytes, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) pieces of ``payload``; an empty payload is one empty piece."""
    if not payload:
        yield 0, b""
        return
    view = memoryview(payload)
    for off in range(0, len(payload), chunk_bytes):
        yield off, bytes(view[off : off + chunk_bytes])


class Assembler:
    """Rebuilds a chunked payload, refusing anything but contiguous, in-order, complete data."""

    def __init__(self, specs: Sequence[Spec], total_bytes: int, checksum: int, max_bytes: int) -> None:
        validate_specs(specs)
        expected = sum(s.nbytes for s in specs)
        if total_bytes > max_bytes or expected > max_bytes:
            raise Rejected(
                RejectReason.OVERSIZE,
                f"upload declares {max(total_bytes, expected)} bytes; the limit is {max_bytes}",
            )
        if total_bytes != expected:
            raise Rejected(
                RejectReason.MALFORMED, f"header declares {total_bytes} bytes but its tensors need {expected}"
            )
        self.specs = list(specs)
        self.total = total_bytes
        self.checksum = checksum
        self._buf = bytearray()

    @property
    def received(self) -> int:
        return len(self._buf)

    def add(self, offset: int, data: bytes) -> None:
        if offset < len(self._buf):
            raise Rejected(
                RejectReason.DUPLICATE_CHUNK,
                f"chunk at offset {offset} repeats bytes already received (have {len(self._buf)})",
            )
        if offset > len(self._buf):
            raise Rejected(
                RejectReason.MALFORMED, f"chunk at offset {offset} leaves a gap (have {len(self._buf)} bytes)"
            )
        if len(self._buf) + len(data) > self.total:
            raise Rejected(RejectReason.OVERSIZE, f"data runs past the declared {self.total} bytes")
        self._buf += data

    def finish(self) -> bytes:
        if len(self._buf) < self.total:
            raise Rejected(RejectReason.TRUNCATED, f"stream ended after {len(self._buf)} of {self.total} bytes")
        if crc32(self._buf) != self.checksum:
            raise Rejected(
                RejectReason.BAD_CHECKSUM,
                f"CRC-32 {crc32(self._buf):#010x} does not match the header's {self.checksum:#010x}",
            )
        return bytes(self._buf)
