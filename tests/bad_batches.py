"""Crafted broken record batches for the tests of R22 (bad input never crashes or bricks the
broker): batches whose header is sound (right length, magic 2, correct CRC) but whose records do
not parse or do not decompress, as a buggy or hostile producer could have written them.

Each helper takes a valid batch (``records.build_batch``) and returns new bytes with a correct
CRC32C, so only record-level decoding (``records.iter_records``) can notice the damage.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from oncelog.protocol import records

_ATTRIBUTES = 21
_RECORDS_COUNT = 57


def _with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[records.CRC_START:])))
    return bytes(buf)


def with_records_count(batch: bytes, count: int) -> bytes:
    """The batch claiming ``count`` records (it holds a different number)."""
    buf = bytearray(batch)
    struct.pack_into(">i", buf, _RECORDS_COUNT, count)
    return _with_crc(buf)


def with_garbage_compression(batch: bytes, codec: int = records.COMPRESSION_GZIP) -> bytes:
    """The batch flagged as compressed with ``codec`` while its payload is plain records: the
    payload does not decompress."""
    buf = bytearray(batch)
    (attrs,) = struct.unpack_from(">h", buf, _ATTRIBUTES)
    struct.pack_into(">h", buf, _ATTRIBUTES, (attrs & ~records.COMPRESSION_MASK) | codec)
    return _with_crc(buf)


def with_truncated_record(batch: bytes) -> bytes:
    """The batch with its last record's bytes cut short (lengths fixed up, CRC recomputed)."""
    buf = bytearray(batch[:-3])
    struct.pack_into(">i", buf, 8, len(buf) - records.LOG_OVERHEAD)
    return _with_crc(buf)


def zero_batch_length(log_path: Path, batch_index: int) -> int:
    """Zero the batchLength field of the ``batch_index``-th batch of a ``.log`` file, in place
    (bit rot of a header: the batch claims to be 12 bytes long). Returns its position."""
    data = log_path.read_bytes()
    positions = [pos for pos, _h in records.iter_batches(data)]
    if batch_index >= len(positions):
        raise ValueError(f"{log_path} holds {len(positions)} batches, no batch {batch_index}")
    pos = positions[batch_index]
    with open(log_path, "r+b") as f:
        f.seek(pos + 8)
        f.write(b"\x00\x00\x00\x00")
    return pos
