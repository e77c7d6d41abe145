"""The primitives of ``__consumer_offsets`` record keys and values: one writer and one reader of
Kafka's encodings, shared by records.py (offset commits, classic group metadata) and
consumer_records.py (the KIP-848 consumer-group records).

Both encodings Kafka uses there:

* non-flexible: big-endian int8/16/32/64, int16-length UTF-8 strings (-1 = null), int32-length
  bytes (-1 = null, read as empty);
* flexible (KIP-482): unsigned varints, compact strings and arrays (length + 1, 0 = null),
  16-byte UUIDs and the tagged-field section after every struct.

``RecordWriter`` raises ``ValueError`` for a string longer than ``MAX_STRING_BYTES``.
``RecordReader`` raises the error class its caller names (each record module keeps its own
typed error) for anything malformed: a field that runs past the record, a varint longer than
5 bytes, a string that is not UTF-8, a null where a value is required, an array or tag count
that cannot fit the bytes left (so no count a record carries sizes a loop beyond the record),
or trailing bytes (``done``). Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid

from oncelog.protocol.varint import read_uvarint

__all__ = ["MAX_STRING_BYTES", "RecordReader", "RecordWriter"]

MAX_STRING_BYTES = 0x7FFF

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordWriter:
    """Appends fields to ``buf``; ``bytes(w.buf)`` is the record."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, s: str | None) -> None:
        """Non-flexible (int16 length; None is written as -1)."""
        if s is None:
            self.i16(-1)
            return
        data = s.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.i16(len(data))
        self.buf += data

    def bytes_(self, b: bytes) -> None:
        """Non-flexible (int32 length)."""
        self.i32(len(b))
        self.buf += b

    def cstring(self, s: str | None) -> None:
        """Compact, nullable."""
        if s is None:
            self.uvarint(0)
            return
        data = s.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes does not fit a record string")
        self.uvarint(len(data) + 1)
        self.buf += data

    def count(self, n: int) -> None:
        """A compact array's length."""
        self.uvarint(n + 1)

    def uuid(self, u: uuid.UUID) -> None:
        self.buf += u.bytes

    def no_tags(self) -> None:
        self.uvarint(0)


class RecordReader:
    """Reads fields from ``data`` in order; every failure raises ``error``."""

    __slots__ = ("data", "error", "pos")

    def __init__(self, data: bytes, error: type[ValueError]) -> None:
        self.data = data
        self.error = error
        self.pos = 0

    def _take(self, st: struct.Struct) -> int:
        try:
            (v,) = st.unpack_from(self.data, self.pos)
        except struct.error:
            raise self.error(f"record truncated at byte {self.pos} of {len(self.data)}") from None
        self.pos += st.size
        return v

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.data, self.pos)
        except ValueError as e:
            raise self.error(f"bad varint at byte {self.pos}: {e}") from None
        return value

    def _raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.error(f"field of {n} bytes at byte {self.pos} runs past the {len(self.data)}-byte record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def _text(self, n: int) -> str:
        try:
            return self._raw(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"string at byte {self.pos - n} is not UTF-8: {e}") from None

    def nullable_string(self) -> str | None:
        """Non-flexible (int16 length, -1 = null)."""
        n = self.i16()
        return None if n == -1 else self._text(n)

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise self.error(f"null string at byte {self.pos - 2} where one is required")
        return s

    def bytes_(self) -> bytes:
        """Non-flexible (int32 length; null reads as empty)."""
        n = self.i32()
        return b"" if n == -1 else self._raw(n)

    def nullable_cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def cstring(self) -> str:
        s = self.nullable_cstring()
        if s is None:
            raise self.error(f"null string before byte {self.pos} where one is required")
        return s

    def count(self, min_item_bytes: int) -> int:
        """A compact array's length; each item takes at least ``min_item_bytes``."""
        n = self.uvarint() - 1
        if n < 0:
            raise self.error(f"null array before byte {self.pos} where one is required")
        if n * min_item_bytes > len(self.data) - self.pos:
            raise self.error(f"array of {n} items cannot fit the {len(self.data)}-byte record")
        return n

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._raw(16))

    def skip_tags(self) -> None:
        n = self.uvarint()
        if n > len(self.data) - self.pos:
            raise self.error(f"{n} tagged fields cannot fit the {len(self.data)}-byte record")
        for _ in range(n):
            self.uvarint()  # tag
            self._raw(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise self.error(f"{len(self.data) - self.pos} trailing bytes after the record")
