"""The shared varint readers (protocol/varint.py, issue 27): what the three hand-written readers
they replaced accepted and refused, checked against the project's own encoders."""

from __future__ import annotations

import pytest

from oncelog.protocol.produce_response import _uvarint as encode_uvarint
from oncelog.protocol.records import _encode_varint
from oncelog.protocol.varint import read_uvarint, read_varint


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**21, 2**28 - 1, 2**31 - 1, 2**32 - 1])
def test_unsigned_round_trips_at_every_width(value: int) -> None:
    data = b"\xaa" + encode_uvarint(value) + b"\xbb"
    assert read_uvarint(data, 1) == (value, len(data) - 1)
    assert read_uvarint(memoryview(data), 1) == (value, len(data) - 1)


@pytest.mark.parametrize("value", [0, -1, 1, 63, -64, 64, -65, 2**31 - 1, -2**31, 2**63 - 1, -2**63])
def test_zigzag_round_trips_at_every_width(value: int) -> None:
    out = bytearray(b"\xaa")
    _encode_varint(value, out)
    out += b"\xbb"
    assert read_varint(memoryview(bytes(out)), 1) == (value, len(out) - 1)


def test_widths_and_ends_are_refused_with_value_error() -> None:
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    assert read_varint(b"\xff" * 9 + b"\x01", 0) == (-2**63, 10)
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        read_varint(b"\xff" * 10 + b"\x01", 0)
    for reader in (read_uvarint, read_varint):
        for data in (b"", b"\x80", b"\xff\xff"):
            with pytest.raises(ValueError, match="ends inside a varint"):
                reader(data, 0)
        with pytest.raises(ValueError, match="ends inside a varint"):
            reader(b"\x01", 1)
