"""Kafka's two varints, read from bytes: the one reader every decoder here uses. Sans-IO.

* ``read_uvarint``: an unsigned varint of at most 5 bytes (LEB128, seven bits a byte, low
  first): the lengths, counts and tags of the flexible request versions (KIP-482). Used by the
  Produce reader (produce_request.py) and the request checker (schema_reader.py).
* ``read_varint``: a zigzag-encoded signed varint of at most 10 bytes (64 bits): the fields of a
  record inside a v2 record batch (records.py).

Both take ``(buf, pos)`` (``bytes``, ``bytearray`` or ``memoryview``) and return ``(value, next
position)``; both raise ``ValueError`` when the buffer ends inside the varint or the varint is
longer than its width allows, and nothing else. Callers translate that into their own error
(a closed connection for a request, ``CorruptMessage`` for a record batch).

Speed. These are called per field on the request and record paths, so each is written for
CPython: the one-byte case (values below 128, nearly every length and count) returns before any
loop; longer ones loop with a plain shift counter (faster in CPython than iterating a tuple of
shifts); the end of the buffer is found by the ``IndexError`` of indexing past it (a ``try``
costs nothing in CPython 3.11 until it raises) instead of a length check per byte. The generated request checker (schema_reader.py) still
inlines the one-byte test itself and calls ``read_uvarint`` only past it.
"""

from __future__ import annotations

__all__ = ["read_uvarint", "read_varint"]


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint (at most 5 bytes) at ``buf[pos]``: (value, next position)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = buf[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos + 1
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")
    except IndexError:
        raise ValueError("buffer ends inside a varint") from None


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag signed varint (at most 10 bytes, 64 bits) at ``buf[pos]``: (value, next
    position)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = buf[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result >> 1) ^ -(result & 1), pos + 1
            shift += 7
            if shift > 63:
                raise ValueError("varint longer than 10 bytes")
    except IndexError:
        raise ValueError("buffer ends inside a varint") from None
