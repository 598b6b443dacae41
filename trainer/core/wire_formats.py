"""How an outer gradient travels: fp32, bf16, or int8 / int4 codes with one fp32 scale per block of values.

A tensor's wire format is its ``TensorSpec.dtype`` (``algorithm.wire_format`` chooses what learners send; the
syncer decodes every format to fp32 before it checks or merges anything):

==========  =====================================================  ==========================  ====================
format      encoding                                               bytes per value             error per value
==========  =====================================================  ==========================  ====================
float32     IEEE single, little-endian                             4                           none
bfloat16    fp32 rounded to nearest even, top 16 bits              2                           ≤ 2⁻⁸ relative
int8        per block of :data:`BLOCK` values: scale s = max|x|    1 + 4 / BLOCK               ≤ s / 2
            / 127, codes round(x / s) in [-127, 127]
int4        as int8 with s = max|x| / 7, codes in [-7, 7], two a   0.5 + 4 / BLOCK             ≤ s / 2
            byte (low nibble first, two's complement)
==========  =====================================================  ==========================  ====================

The 4-bit format is the paper's ("outer gradients quantized to 4 bits"); no error feedback is kept, as there. A block's
scale comes first, then its codes, block after block, so a tensor's bytes are one contiguous run (the framing of
``trainer.wire`` is unchanged). Decoding trusts nothing: a scale that is not finite gives non-finite values, which
the syncer's upload checks refuse.

Example:
    >>> x = np.linspace(-1, 1, 300, dtype=np.float32)
    >>> [nbytes(f, x.size) for f in FORMATS]
    [1200, 600, 308, 158]
    >>> y = decode(encode(x, "int8"), "int8", x.shape)
    >>> bool(np.abs(y - x).max() <= 1 / 127 / 2 + 1e-7)
    True
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

__all__ = ["BLOCK", "FORMATS", "Format", "decode", "encode", "nbytes", "roundtrip"]

Format = str  # one of FORMATS
FORMATS: tuple[Format, ...] = ("float32", "bfloat16", "int8", "int4")
BLOCK = 256
_LEVELS = {"int8": 127, "int4": 7}
_LE_F32 = np.dtype("<f4")


def nbytes(fmt: Format, count: int) -> int:
    """Bytes ``count`` values take in ``fmt``.

    >>> nbytes("int4", 257), nbytes("bfloat16", 3), nbytes("float32", 0)
    (137, 6, 0)
    """
    if fmt == "float32":
        return 4 * count
    if fmt == "bfloat16":
        return 2 * count
    blocks = -(-count // BLOCK)
    if fmt == "int8":
        return 4 * blocks + count
    if fmt == "int4":
        full, rest = divmod(count, BLOCK)
        return 4 * blocks + full * (BLOCK // 2) + (rest + 1) // 2
    raise ValueError(f"unknown wire format {fmt!r}: one of {FORMATS}")


def _code_bytes(fmt: Format, n: int) -> int:
    return n if fmt == "int8" else (n + 1) // 2


def _encode_blocks(rows: np.ndarray, fmt: Format) -> np.ndarray:
    """[b, n] fp32 values -> [b, 4 + code bytes] uint8: each row's scale, then its codes."""
    levels = _LEVELS[fmt]
    scale = (np.max(np.abs(rows), axis=1) / levels).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.where(scale[:, None] > 0, np.rint(rows / safe[:, None]), 0).clip(-levels, levels).astype(np.int8)
    if fmt == "int4":
        nib = codes.view(np.uint8) & 0x0F
        if nib.shape[1] % 2:
            nib = np.pad(nib, ((0, 0), (0, 1)))
        codes = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return np.concatenate([scale.astype(_LE_F32).view(np.uint8).reshape(-1, 4), codes.view(np.uint8)], axis=1)


def _decode_blocks(raw: np.ndarray, fmt: Format, n: int) -> np.ndarray:
    """Inverse of :func:`_encode_blocks` for rows of ``n`` values."""
    scale = np.ascontiguousarray(raw[:, :4]).view(_LE_F32)[:, 0].astype(np.float32)
    packed = raw[:, 4:]
    if fmt == "int8":
        codes = packed.view(np.int8).astype(np.float32)
    else:
        nib = np.empty((packed.shape[0], packed.shape[1] * 2), np.uint8)
        nib[:, 0::2], nib[:, 1::2] = packed & 0x0F, packed >> 4
        codes = nib[:, :n].astype(np.int16)
        codes = np.where(codes > 7, codes - 16, codes).astype(np.float32)  # two's complement nibbles
    with np.errstate(over="ignore", invalid="ignore"):
        return codes * scale[:, None]


def encode(x: np.ndarray, fmt: Format) -> bytes:
    """``x``'s values (as fp32, C order) in ``fmt``."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if fmt == "float32":
        return flat.astype(_LE_F32).tobytes()
    if fmt == "bfloat16":
        return flat.astype(ml_dtypes.bfloat16).view("<u2").tobytes()
    if fmt not in _LEVELS:
        raise ValueError(f"unknown wire format {fmt!r}: one of {FORMATS}")
    full = flat.size // BLOCK * BLOCK
    parts = [_encode_blocks(flat[:full].reshape(-1, BLOCK), fmt).tobytes()]
    if full < flat.size:
        parts.append(_encode_blocks(flat[full:].reshape(1, -1), fmt).tobytes())
    return b"".join(parts)


def decode(data: bytes | memoryview, fmt: Format, shape: tuple[int, ...]) -> np.ndarray:
    """A writable fp32 array of ``shape`` from ``fmt``'s bytes (exactly :func:`nbytes` of them)."""
    count = math.prod(shape)  # exact: no 64-bit wrap on a hostile shape
    if len(data) != nbytes(fmt, count):
        raise ValueError(f"{len(data)} bytes for {count} values in {fmt}; {nbytes(fmt, count)} expected")
    if fmt == "float32":
        return np.frombuffer(data, _LE_F32).astype(np.float32).reshape(shape)
    if fmt == "bfloat16":
        return np.frombuffer(data, "<u2").view(ml_dtypes.bfloat16).astype(np.float32).reshape(shape)
    raw = np.frombuffer(data, np.uint8)
    full, rest = divmod(count, BLOCK)
    row = 4 + _code_bytes(fmt, BLOCK)
    out = [_decode_blocks(raw[: full * row].reshape(full, row), fmt, BLOCK).reshape(-1)]
    if rest:
        out.append(_decode_blocks(raw[full * row :].reshape(1, -1), fmt, rest).reshape(-1))
    return np.concatenate(out).astype(np.float32).reshape(shape)


def roundtrip(x: np.ndarray, fmt: Format) -> np.ndarray:
    """What the syncer receives for ``x`` sent in ``fmt`` (deterministic mode applies this in place of the wire).

    >>> roundtrip(np.array([1.0, 1.0 + 2**-10], np.float32), "bfloat16").tolist()
    [1.0, 1.0]
    """
    return decode(encode(x, fmt), fmt, tuple(np.shape(x)))
