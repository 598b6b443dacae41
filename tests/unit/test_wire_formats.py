"""Outer-gradient wire formats (trainer.core.wire_formats): sizes, error bounds, hostile bytes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trainer.core.wire_formats import BLOCK, FORMATS, decode, encode, nbytes, roundtrip
from trainer.wire import Assembler, decode_tensors, encode_tensors, split_chunks

FINITE = hnp.arrays(
    np.float32,
    st.integers(0, 3 * BLOCK + 7),
    elements=st.floats(-(2.0**100), 2.0**100, allow_nan=False, allow_infinity=False, width=32),
)


@given(FINITE, st.sampled_from(FORMATS))
def test_every_format_takes_its_bytes_and_stays_within_its_error(x: np.ndarray, fmt: str) -> None:
    data = encode(x, fmt)
    assert len(data) == nbytes(fmt, x.size)
    y = decode(data, fmt, x.shape)
    assert y.dtype == np.float32 and y.shape == x.shape and y.flags.writeable
    if fmt == "float32":
        assert np.array_equal(x, y)
    elif fmt == "bfloat16":
        assert np.array_equal(y, x.astype(ml_dtypes.bfloat16).astype(np.float32))
        assert (np.abs(y - x) <= np.abs(x) * 2.0**-8 + 1e-38).all()
    else:
        levels = 127 if fmt == "int8" else 7
        for i in range(0, x.size, BLOCK):
            block, got = x[i : i + BLOCK].astype(np.float64), y[i : i + BLOCK].astype(np.float64)
            scale = np.abs(block).max() / levels
            assert (np.abs(got - block) <= scale / 2 * (1 + 1e-6) + 1e-30).all()
            assert (np.abs(got) <= np.abs(block).max() * (1 + 1e-6)).all()  # never larger than the block's top


def test_int4_codes_keep_their_sign() -> None:
    x = np.array([-7, -3, -1, 0, 1, 3, 7], np.float32)
    assert roundtrip(x, "int4").tolist() == x.tolist()


def test_a_non_finite_scale_decodes_to_non_finite_values() -> None:
    """A hostile learner's scale: decoding does not hide it (the upload checks then refuse non-finite values)."""
    data = bytearray(encode(np.ones(10, np.float32), "int8"))
    data[:4] = np.array([np.inf], "<f4").tobytes()
    assert not np.isfinite(decode(bytes(data), "int8", (10,))).all()


def test_the_wrong_number_of_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="expected"):
        decode(b"\0" * 5, "int4", (4,))


@pytest.mark.parametrize("fmt", FORMATS)
def test_tensors_travel_framed_in_each_format(fmt: str) -> None:
    """encode_tensors / Assembler / decode_tensors carry a fragment in any format; the specs name it."""
    rng = np.random.default_rng(0)
    t = {"a": rng.standard_normal((3, 300)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    specs, payload = encode_tensors(t, fmt=fmt)
    assert {s.dtype for s in specs} == {fmt} and len(payload) == sum(s.nbytes for s in specs)
    from trainer.wire import crc32

    asm = Assembler(specs, len(payload), crc32(payload), max_bytes=1 << 20)
    for off, data in split_chunks(payload, 64):
        asm.add(off, data)
    got = decode_tensors(specs, asm.finish())
    for n, x in t.items():
        assert np.array_equal(got[n], roundtrip(x, fmt))


def test_the_bytes_on_the_wire_shrink_as_the_paper_says() -> None:
    """A fragment of a million values: bf16 halves fp32, int8 a quarter (plus 1.6% of scales), int4 an eighth."""
    n = 1 << 20
    ratios = [nbytes(f, n) / nbytes("float32", n) for f in FORMATS]
    assert ratios == [1.0, 0.5, pytest.approx(0.2539, abs=1e-4), pytest.approx(0.1289, abs=1e-4)]
