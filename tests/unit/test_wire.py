"""Unit tests for trainer.wire (tensors as raw bytes, chunked, CRC-32 checked)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trainer.core.reasons import Rejected, RejectReason
from trainer.wire import (
    CHUNK_BYTES,
    Assembler,
    Spec,
    crc32,
    decode_tensors,
    encode_tensors,
    split_chunks,
    validate_specs,
)

SETTINGS = settings(max_examples=60, deadline=None)

_f32 = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6),
    elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
)
_tensors = st.dictionaries(st.text(alphabet="abcdefghij/._", min_size=1, max_size=6), _f32, min_size=1, max_size=5)


def reason_of(fn) -> RejectReason:
    with pytest.raises(Rejected) as info:
        fn()
    return info.value.reason


def _assembler(tensors=None, max_bytes=1 << 20):
    tensors = tensors if tensors is not None else {"w": np.arange(10, dtype=np.float32)}
    specs, payload = encode_tensors(tensors)
    return Assembler(specs, len(payload), crc32(payload), max_bytes=max_bytes), specs, payload


# ---- round trip --------------------------------------------------------------
@SETTINGS
@given(_tensors, st.integers(min_value=1, max_value=64))
def test_encode_chunk_assemble_decode_round_trip(tensors, chunk):
    specs, payload = encode_tensors(tensors)
    assert [s.name for s in specs] == sorted(tensors)
    assert len(payload) == sum(s.nbytes for s in specs)
    a = Assembler(specs, len(payload), crc32(payload), max_bytes=1 << 20)
    for off, data in split_chunks(payload, chunk):
        a.add(off, data)
    assert a.received == len(payload)
    out = decode_tensors(specs, a.finish())
    assert out.keys() == tensors.keys()
    for n, t in tensors.items():
        assert out[n].dtype == np.float32 and out[n].shape == t.shape
        np.testing.assert_array_equal(out[n], t)  # NaNs compare equal here, bit-exact values
        assert out[n].tobytes() == t.tobytes()
        assert out[n].flags.writeable


@pytest.mark.parametrize("value", [np.float32(2.5), np.zeros((), np.float32) + 7.0])
def test_scalar_tensor_round_trip_keeps_its_shape(value):
    # A 0-d tensor (e.g. a learned scale) must come back 0-d: decode_tensors is the inverse of encode_tensors.
    t = {"scale": np.asarray(value), "w": np.ones(2, np.float32)}
    specs, payload = encode_tensors(t)
    assert {s.name: s.shape for s in specs} == {"scale": (), "w": (2,)}
    out = decode_tensors(specs, payload)
    assert out["scale"].shape == ()
    assert float(out["scale"]) == float(value)


def test_explicit_order_is_kept():
    t = {"a": np.ones(1, np.float32), "b": np.zeros(2, np.float32)}
    specs, payload = encode_tensors(t, order=["b", "a"])
    assert [s.name for s in specs] == ["b", "a"]
    assert payload == t["b"].tobytes() + t["a"].tobytes()


def test_big_endian_and_non_contiguous_inputs_are_sent_little_endian():
    be = np.arange(6, dtype=">f4").reshape(2, 3)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    specs, payload = encode_tensors({"be": be, "s": strided})
    assert [s.dtype for s in specs] == ["float32", "float32"]
    out = decode_tensors(specs, payload)
    np.testing.assert_array_equal(out["be"], be)
    np.testing.assert_array_equal(out["s"], strided)
    assert payload[:4] == np.float32(0).tobytes() and payload[4:8] == b"\x00\x00\x80\x3f"  # 1.0f little-endian


def test_decode_rejects_short_and_long_payloads():
    specs, payload = encode_tensors({"w": np.ones(4, np.float32)})
    assert reason_of(lambda: decode_tensors(specs, payload[:-1])) is RejectReason.TRUNCATED
    assert reason_of(lambda: decode_tensors(specs, payload + b"\x00")) is RejectReason.OVERSIZE


# ---- split_chunks ----------------------------------------------------------------
@SETTINGS
@given(st.binary(min_size=0, max_size=300), st.integers(min_value=1, max_value=64))
def test_split_chunks_are_bounded_contiguous_and_cover_the_payload(payload, chunk):
    pieces = list(split_chunks(payload, chunk))
    assert all(len(data) <= chunk for _, data in pieces)
    offsets = [off for off, _ in pieces]
    expected_offsets = [0]
    for _, data in pieces[:-1]:
        expected_offsets.append(expected_offsets[-1] + len(data))
    assert offsets == expected_offsets
    assert b"".join(data for _, data in pieces) == payload
    assert all(len(data) > 0 for _, data in pieces) or payload == b""


def test_empty_payload_is_one_empty_piece():
    assert list(split_chunks(b"", 8)) == [(0, b"")]
    a = Assembler([Spec("e", (0,), "float32")], 0, crc32(b""), max_bytes=10)
    a.add(0, b"")
    assert decode_tensors(a.specs, a.finish())["e"].shape == (0,)


def test_default_chunk_size_is_below_grpc_limit():
    assert CHUNK_BYTES <= 4 * 1024 * 1024 - 64 * 1024


# ---- Assembler refusals ------------------------------------------------------------
def test_duplicate_chunk():
    a, _, payload = _assembler()
    a.add(0, payload[:8])
    assert reason_of(lambda: a.add(0, payload[:8])) is RejectReason.DUPLICATE_CHUNK
    assert reason_of(lambda: a.add(4, payload[4:12])) is RejectReason.DUPLICATE_CHUNK


def test_gap_is_malformed():
    a, _, payload = _assembler()
    a.add(0, payload[:8])
    assert reason_of(lambda: a.add(12, payload[12:16])) is RejectReason.MALFORMED


def test_overflow_is_oversize():
    a, _, payload = _assembler()
    a.add(0, payload[:32])
    assert reason_of(lambda: a.add(32, payload[32:] + b"\x00")) is RejectReason.OVERSIZE


def test_early_end_is_truncated():
    a, _, payload = _assembler()
    a.add(0, payload[:-4])
    assert reason_of(a.finish) is RejectReason.TRUNCATED


def test_bad_crc_is_bad_checksum():
    specs, payload = encode_tensors({"w": np.arange(10, dtype=np.float32)})
    a = Assembler(specs, len(payload), crc32(payload) ^ 1, max_bytes=1 << 20)
    a.add(0, payload)
    assert reason_of(a.finish) is RejectReason.BAD_CHECKSUM


def test_corrupted_byte_is_bad_checksum():
    a, _, payload = _assembler()
    corrupted = bytearray(payload)
    corrupted[5] ^= 0x10
    a.add(0, bytes(corrupted))
    assert reason_of(a.finish) is RejectReason.BAD_CHECKSUM


def test_declared_size_mismatch_is_malformed():
    specs, payload = encode_tensors({"w": np.arange(10, dtype=np.float32)})
    for total in (len(payload) - 4, len(payload) + 4, 0):
        assert (
            reason_of(lambda total=total: Assembler(specs, total, crc32(payload), max_bytes=1 << 20))
            is RejectReason.MALFORMED
        )


def test_over_max_bytes_is_oversize():
    specs, payload = encode_tensors({"w": np.arange(10, dtype=np.float32)})
    assert (
        reason_of(lambda: Assembler(specs, len(payload), crc32(payload), max_bytes=len(payload) - 1))
        is RejectReason.OVERSIZE
    )
    # the tensors' size counts too, even when the declared total lies
    assert reason_of(lambda: Assembler(specs, 4, crc32(payload), max_bytes=8)) is RejectReason.OVERSIZE
    Assembler(specs, len(payload), crc32(payload), max_bytes=len(payload))  # exactly at the limit is fine


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**62, 4), (2**63 - 1, 2**63 - 1, 3)])
def test_a_shape_whose_size_overflows_64_bits_is_oversize_not_empty(shape):
    """A hostile header's dimensions (int64 on the wire) multiply exactly: with a wrapping 64-bit product,
    (2**62, 4) came to 0 bytes and an empty body was accepted as that tensor."""
    specs = [Spec("w", shape, "float32")]
    assert specs[0].nbytes > 2**64
    for total in (0, 1 << 20):
        assert (
            reason_of(lambda total=total: Assembler(specs, total, 0, max_bytes=1 << 20)) is RejectReason.OVERSIZE
        )


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", "uint8", "int2", "object"])
def test_only_the_wire_formats_are_accepted(dtype):
    specs = [Spec("w", (2,), "float32"), Spec("x", (2,), dtype)]
    assert reason_of(lambda: validate_specs(specs)) is RejectReason.BAD_DTYPE
    assert reason_of(lambda: Assembler(specs, 16, 0, max_bytes=1 << 20)) is RejectReason.BAD_DTYPE


def test_tensors_are_sent_in_the_format_asked_whatever_their_dtype():
    """A float64 tensor is sent as float32 values (the learner's format), never with its own dtype."""
    specs, payload = encode_tensors({"w": np.ones(3, np.float64)})
    assert [s.dtype for s in specs] == ["float32"] and len(payload) == 12


def test_bad_specs_are_refused():
    assert reason_of(lambda: validate_specs([Spec("", (1,), "float32")])) is RejectReason.MALFORMED
    assert reason_of(lambda: validate_specs([Spec("a", (1,), "float32")] * 2)) is RejectReason.MALFORMED
    assert reason_of(lambda: validate_specs([Spec("a", (2, -1), "float32")])) is RejectReason.BAD_SHAPE


def test_spec_nbytes():
    assert Spec("s", (), "float32").nbytes == 4
    assert Spec("m", (3, 5), "float32").nbytes == 60
    assert Spec("z", (0, 7), "float32").nbytes == 0


def test_crc32_is_unsigned_and_matches_zlib():
    import zlib

    data = b"decoupled diloco" * 10
    assert crc32(data) == zlib.crc32(data) & 0xFFFFFFFF
    assert 0 <= crc32(data) < 2**32
    assert crc32(memoryview(data)) == crc32(data)
