"""Kafka record batch v2 (magic 2): header view, validation, offset rewrite, builders.

Theory of operation. The produce and fetch paths treat a batch as an opaque blob with a 61-byte
header: ``parse_header`` reads the header with one ``struct.unpack_from``,
``validate_produce_batch`` checks what Kafka checks on produce (one batch, magic 2, lengths,
CRC32C, counts, no control records, size, and every record's structure, walked in C after a
bounded decompression) without making a Python object of a single record, and
``with_base_offset`` / ``offset_prefix`` rewrite the fields that lie *outside* the CRC (base offset,
partition leader epoch), so the broker assigns offsets without recomputing the checksum.

Per-record work (``iter_records``, ``build_batch``, ``build_control_batch``,
``read_control_marker``) exists for internal topics, compaction, ListOffsets refinement and tests;
it is never on the produce or fetch hot path.

Layout (big endian)::

    @0  baseOffset int64        @8  batchLength int32 (bytes after this field)
    @12 partitionLeaderEpoch    @16 magic int8        @17 crc uint32 (CRC32C of @21..end)
    @21 attributes int16        @23 lastOffsetDelta   @27 baseTimestamp int64
    @35 maxTimestamp int64      @43 producerId int64  @51 producerEpoch int16
    @53 baseSequence int32      @57 recordsCount      @61 records

Errors: every malformed input raises a ``KafkaError`` subclass (``CorruptMessage``,
``InvalidRecord``, ``UnsupportedForMessageFormat``, ``MessageTooLarge``); any other exception
escaping this module is a bug. The module is pure: no I/O, no asyncio.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Container, Iterator, Sequence
from typing import NamedTuple

import cramjam
import crc32c as _crc32c

from oncelog.protocol import _recordwalk

from oncelog.protocol.errors import (
    CorruptMessage,
    ErrorCode,
    InvalidRecord,
    MessageTooLarge,
    UnsupportedForMessageFormat,
)
from oncelog.protocol.varint import read_varint as _varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "ControlMarker",
    "Record",
    "build_batch",
    "build_control_batch",
    "filter_batch",
    "iter_batches",
    "iter_records",
    "offset_prefix",
    "parse_header",
    "read_control_marker",
    "TimestampErrors",
    "TimestampRule",
    "validate_produce_batch",
    "with_base_offset",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC = 2
CRC_START = 21  # the CRC covers attributes .. end of batch
NO_TIMESTAMP = -1

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 0 CreateTime, 1 LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_LENGTH = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_INT32_MAX = 0x7FFFFFFF
#: Default bound on a batch's decompressed size (broker property message.max.uncompressed.bytes).
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
_FIRST_GUESS = 8  # first output buffer: this many times the compressed size (grows x8 up to the bound)
_OVERFLOW = ("failed to write whole buffer", "smaller than required")
assert _HEADER.size == BATCH_HEADER_SIZE


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 record batch, as stored (no validation implied)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else TIMESTAMP_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; wraps past int32 max to 0, as Kafka's does. -1 if none."""
        if self.base_sequence < 0:
            return -1
        seq = self.base_sequence + self.last_offset_delta
        return seq - _INT32_MAX - 1 if seq > _INT32_MAX else seq


class Record(NamedTuple):
    """One record of a batch, offsets and timestamps absolute. Header keys are str."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class ControlMarker(NamedTuple):
    """The content of a transaction marker (control record of type COMMIT or ABORT)."""

    commit: bool
    coordinator_epoch: int


# --------------------------------------------------------------------------------------------
# Header-level (hot path)


def _check_magic(buf: bytes | bytearray | memoryview, pos: int) -> None:
    magic = buf[pos + 16]
    if magic != MAGIC:
        if magic in (0, 1):
            raise UnsupportedForMessageFormat(
                f"record batch at {pos}: magic {magic} (legacy message format) received, 2 required"
            )
        raise InvalidRecord(f"record batch at {pos}: magic {magic - 256 if magic > 127 else magic} received, 2 required")


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch starting at ``buf[pos]``.

    Checks only that 61 bytes are present and magic is 2; lengths and CRC are not verified.
    Raises CorruptMessage (too short), UnsupportedForMessageFormat (magic 0/1) or InvalidRecord
    (any other magic).
    """
    available = len(buf) - pos
    if available < BATCH_HEADER_SIZE:
        if available > 16:
            _check_magic(buf, pos)
        raise CorruptMessage(
            f"record batch at {pos}: {available} bytes available, header needs {BATCH_HEADER_SIZE}"
        )
    _check_magic(buf, pos)
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


class RecordErrors(InvalidRecord):  # type: ignore[misc, valid-type]
    """INVALID_RECORD naming the records at fault (Produce v8+ ``record_errors``): a list of
    (batch index, message), as Kafka's ``RecordValidationException``."""

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        super().__init__(f"One or more records have been rejected due to {len(errors)} record errors in total, "
                         f"and only showing the first three errors at most: [{shown}]")
        self.record_errors = errors


class TimestampErrors(RecordErrors):
    """INVALID_TIMESTAMP naming the records at fault, as Kafka's LogValidator answers a record
    whose timestamp is out of message.timestamp.before/after.max.ms (KIP-937), or a producer's
    batch that claims LogAppendTime."""

    code = ErrorCode.invalid_timestamp

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        RecordErrors.__init__(self, errors)
        Exception.__init__(self, "One or more records have been rejected due to invalid timestamp")


class TimestampRule(NamedTuple):
    """What Kafka's LogValidator checks of record timestamps: ``now_ms`` (the broker's clock),
    the topic's message.timestamp.before.max.ms / after.max.ms, and whether the topic is
    LogAppendTime (then record timestamps are not checked: the broker stamps the batch)."""

    now_ms: int
    before_max_ms: int
    after_max_ms: int
    log_append_time: bool = False


def validate_produce_batch(
    buf: bytes | bytearray | memoryview,
    max_message_bytes: int,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    *,
    compacted: bool = False,
    timestamps: TimestampRule | None = None,
    schema_ids: SchemaIdRule | None = None,
) -> BatchHeader:
    """Check the records field of a produce request (v3+) the way Kafka's broker does
    (LogValidator), so that whatever is acknowledged can be read by every client.

    The field must hold exactly one magic-2 batch whose batchLength matches ``len(buf)``, no
    larger than ``max_message_bytes``, with a correct CRC32C, at least one record,
    ``lastOffsetDelta == recordsCount - 1``, not a control batch, and a non-negative base sequence
    when it carries a producer id. Then its records: decompressed into at most
    ``max_uncompressed`` bytes, they must be exactly ``recordsCount`` well-formed records with
    offset deltas 0, 1, 2, … (``_recordwalk``, in C: no Python object per record).

    Raises: InvalidRecord (empty, several batches, bad counts, control batch, bad sequence,
    unknown codec, unknown magic, a malformed record), UnsupportedForMessageFormat (magic 0/1),
    CorruptMessage (lengths, CRC, a payload that does not decompress), MessageTooLarge (over
    ``max_message_bytes``, or expanding beyond ``max_uncompressed``), RecordErrors (an
    INVALID_RECORD listing each record without a key, when ``compacted``: a compacted topic
    refuses them, as Kafka's LogValidator), TimestampErrors (INVALID_TIMESTAMP, with
    ``timestamps``: ``_check_timestamps``), SchemaIdErrors (INVALID_RECORD naming records whose
    key/value schema id ``schema_ids`` does not allow: ``_check_schema_ids``). Returns the parsed
    header.
    """
    n = len(buf)
    if n == 0:
        raise InvalidRecord("produce request must hold exactly one record batch per partition, got none")
    if n <= 16:
        raise CorruptMessage(f"record batch truncated: {n} bytes, header needs {BATCH_HEADER_SIZE}")
    h = parse_header(buf, 0)
    size = h.size
    if size < BATCH_HEADER_SIZE:
        raise CorruptMessage(f"record batch length {h.batch_length} below the minimum {BATCH_HEADER_SIZE - LOG_OVERHEAD}")
    if size > n:
        raise CorruptMessage(f"record batch truncated: batchLength says {size} bytes, {n} received")
    if size < n:
        if _looks_like_batch(buf, size):
            raise InvalidRecord("produce request must hold exactly one record batch per partition, got more")
        raise CorruptMessage(f"record batch length mismatch: batchLength says {size} bytes, {n} received")
    if size > max_message_bytes:
        raise MessageTooLarge(f"record batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    actual = _crc32c.crc32c(mv[CRC_START:size])
    if actual != h.crc:
        raise CorruptMessage(f"record batch CRC mismatch: header says {h.crc:#010x}, computed {actual:#010x}")
    if h.records_count < 1:
        raise InvalidRecord(f"record batch has recordsCount {h.records_count}, at least 1 required")
    if h.last_offset_delta != h.records_count - 1:
        raise InvalidRecord(
            f"record batch offset range inconsistent: lastOffsetDelta {h.last_offset_delta}, "
            f"recordsCount {h.records_count} (expected lastOffsetDelta {h.records_count - 1})"
        )
    if h.attributes & CONTROL_BIT:
        raise InvalidRecord("clients may not write control records")
    if h.compression > COMPRESSION_ZSTD:
        raise InvalidRecord(f"record batch compression codec {h.compression} unknown")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecord(f"producer {h.producer_id}: invalid base sequence {h.base_sequence}")
    payload = mv[BATCH_HEADER_SIZE:size]
    if h.compression != COMPRESSION_NONE:
        payload = decompress(h.compression, payload, max_uncompressed, reuse=True)
    try:
        walked = _recordwalk.walk(payload, h.records_count, h.base_timestamp, schema_ids.sides if schema_ids else 0)
    except ValueError as e:
        raise InvalidRecord(f"record batch of {h.records_count} record(s): {e}") from None
    if compacted and walked is not None and walked[0]:
        # The rejection path only: records are decoded here to name the ones at fault.
        raise RecordErrors([(i, "Compacted topic cannot accept message without key")
                            for i, rec in enumerate(iter_records(mv[:size], max_uncompressed=max_uncompressed))
                            if rec.key is None])
    if timestamps is not None and walked is not None:
        _check_timestamps(h, walked, timestamps)
    if schema_ids is not None and walked is not None:
        _check_schema_ids(walked, schema_ids, mv[:size], max_uncompressed)
    return h


# -- schema ids (the topic configs confluent.key/value.schema.validation) ----------------------


class SchemaIdRule(NamedTuple):
    """Which schema ids a topic's keys and values may carry (Confluent's wire format: magic
    byte 0, then the id as a 4-byte big-endian int): ``keys``/``values`` hold the allowed ids
    (None: that side is not checked); ``key_subject``/``value_subject`` name them in messages.
    A null key or value is always accepted (tombstones). Built by oncelog/schema_registry."""

    keys: Container[int] | None
    values: Container[int] | None
    key_subject: str = ""
    value_subject: str = ""

    @property
    def sides(self) -> int:
        return (1 if self.keys is not None else 0) | (2 if self.values is not None else 0)


class SchemaIdErrors(RecordErrors):  # type: ignore[misc, valid-type]
    """INVALID_RECORD naming records whose schema id is not allowed; ``unknown``: the framed
    ids that were not in the rule (a registry that is behind may know them a moment later)."""

    def __init__(self, errors: list[tuple[int, str]], unknown: set[int]) -> None:
        super().__init__(errors)
        self.unknown = unknown


def _id_problem(sid: int, side: str, allowed: Container[int], subject: str) -> str | None:
    if sid == -1:
        return None
    if sid == -2:
        return (f"The {side} does not start with a schema id (magic byte 0 and a 4-byte id), "
                f"and schema validation is on for {side}s")
    if sid in allowed:
        return None
    return f"Schema id {sid} of the {side} is not registered under subject {subject}"


def _check_schema_ids(walked: tuple, rule: SchemaIdRule, batch: bytes | bytearray | memoryview,
                      max_uncompressed: int) -> None:
    """From the walker's distinct ids per side (no object per record); when a side had too many
    distinct ids for the walker, every record is looked at (the rejection-grade path)."""
    found: dict[int, str] = {}
    unknown: set[int] = set()
    sides = ((7, "key", rule.keys, rule.key_subject), (8, "value", rule.values, rule.value_subject))
    for slot, side, allowed, subject in sides:
        if allowed is None:
            continue
        pairs = walked[slot]
        if pairs is None:
            for i, rec in enumerate(iter_records(batch, max_uncompressed=max_uncompressed)):
                data = rec.key if side == "key" else rec.value
                sid = -1 if data is None else -2 if len(data) < 5 or data[0] != 0 else \
                    int.from_bytes(data[1:5], "big")
                why = _id_problem(sid, side, allowed, subject)
                if why is not None:
                    found.setdefault(i, why)
                    if sid >= 0:
                        unknown.add(sid)
            continue
        for k in range(0, len(pairs), 2):
            sid, first = pairs[k], pairs[k + 1]
            why = _id_problem(sid, side, allowed, subject)
            if why is not None:
                found.setdefault(first, why)
                if sid >= 0:
                    unknown.add(sid)
    if found:
        raise SchemaIdErrors(sorted(found.items()), unknown)


def _check_timestamps(h: BatchHeader, walked: tuple[int, ...], rule: TimestampRule) -> None:
    """Kafka's LogValidator.validateTimestamp for every record, from the batch header and the
    walker's lowest and highest record timestamps (no Python object per record). A record's
    timestamp is baseTimestamp + its delta, or the batch's maxTimestamp when the batch claims
    LogAppendTime (Kafka's DefaultRecordBatch). On a CreateTime topic a record whose timestamp is
    not -1 must lie in [now - before.max.ms, now + after.max.ms]; otherwise (a LogAppendTime
    topic, or a record without a timestamp) the batch must not claim LogAppendTime. Raises
    TimestampErrors naming the lowest and highest records at fault (Kafka names every one)."""
    now, before, after, log_append_time = rule
    lo, hi = now - before, now + after
    if not h.attributes & TIMESTAMP_TYPE_BIT:
        if log_append_time:
            return
        _, _, _, low, low_i, high, high_i = walked[:7]
        if lo <= low and high <= hi or low_i < 0:  # the fast path: every record in range (or none stamped)
            return
        raise TimestampErrors(sorted({(i, _out_of_range(ts, i, lo, hi)) for ts, i in ((low, low_i), (high, high_i))
                                      if not lo <= ts <= hi}))
    # the batch claims LogAppendTime: every record's timestamp is its maxTimestamp
    if log_append_time or h.max_timestamp == NO_TIMESTAMP:
        raise TimestampErrors([(0, "Invalid timestamp type in message: producer should not set timestamp type "
                                   "to LogAppendTime")])
    if not lo <= h.max_timestamp <= hi:
        raise TimestampErrors([(0, _out_of_range(h.max_timestamp, 0, lo, hi))])


def _out_of_range(ts: int, index: int, lo: int, hi: int) -> str:
    return (f"Timestamp {ts} of message with offset {index} is out of range. "
            f"The timestamp should be within [{lo}, {hi}]")


_ATTRIBUTES_AND_MAX_TS = struct.Struct(">h")
_MAX_TS = struct.Struct(">q")
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35


def stamp_log_append_time(batch: bytes | bytearray | memoryview, header: BatchHeader,
                          now_ms: int) -> tuple[bytearray, BatchHeader]:
    """A copy of a validated producer batch for a ``message.timestamp.type=LogAppendTime``
    topic: the timestamp-type attribute set, the max timestamp ``now_ms`` and the CRC recomputed
    (as Kafka's ``DefaultRecordBatch.setMaxTimestamp``; the records are untouched: consumers
    read a LogAppendTime batch's max timestamp as every record's timestamp). Header fields only:
    one copy and one CRC pass, no per-record work. Returns the batch and its new header."""
    out = bytearray(batch)
    attributes = (header.attributes | TIMESTAMP_TYPE_BIT) & 0xFFFF
    _ATTRIBUTES_AND_MAX_TS.pack_into(out, _ATTRIBUTES_POS, attributes - 0x10000 if attributes > 0x7FFF else attributes)
    _MAX_TS.pack_into(out, _MAX_TIMESTAMP_POS, now_ms)
    crc = _crc32c.crc32c(memoryview(out)[CRC_START:])
    struct.pack_into(">I", out, 17, crc)
    return out, header._replace(attributes=attributes, max_timestamp=now_ms, crc=crc)


def _looks_like_batch(buf: bytes | bytearray | memoryview, pos: int) -> bool:
    """Whether a plausible second batch header starts at ``pos`` (to tell 'two batches' from junk)."""
    if len(buf) - pos < BATCH_HEADER_SIZE or buf[pos + 16] != MAGIC:
        return False
    (length,) = _LENGTH.unpack_from(buf, pos + 8)
    return BATCH_HEADER_SIZE <= length + LOG_OVERHEAD <= len(buf) - pos


def offset_prefix(buf: bytes | bytearray | memoryview, base_offset: int, partition_leader_epoch: int = 0) -> bytes:
    """The 16 bytes that replace ``buf[:16]`` to give the batch ``base_offset`` and the epoch.

    Those bytes lie outside the CRC, so ``offset_prefix(...) + buf[16:]`` is a valid batch; the
    log writes the two pieces with one ``os.writev`` and copies nothing.
    """
    (length,) = _LENGTH.unpack_from(buf, 8)
    return _PREFIX.pack(base_offset, length, partition_leader_epoch)


def with_base_offset(buf: bytes | bytearray | memoryview, base_offset: int, partition_leader_epoch: int = 0) -> bytes:
    """A copy of the batch with base offset and partition leader epoch rewritten (one copy)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return b"".join((offset_prefix(buf, base_offset, partition_leader_epoch), mv[16:]))


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for consecutive complete batches starting at ``buf[pos]``.

    Stops silently at the first position that does not hold a complete, plausible batch (short
    tail, magic != 2, length below the header size, negative counts, CRC mismatch when
    ``verify_crc``). Valid data therefore ends at ``position + header.size`` of the last batch
    yielded (or ``pos`` if none); use ``valid_prefix_end`` to get that number directly.
    """
    n = len(buf)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    unpack = _HEADER.unpack_from
    while n - pos >= BATCH_HEADER_SIZE:
        if buf[pos + 16] != MAGIC:
            return
        h = BatchHeader._make(unpack(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE or size > n - pos or h.last_offset_delta < 0 or h.records_count < 0:
            return
        if verify_crc and _crc32c.crc32c(mv[pos + CRC_START : pos + size]) != h.crc:
            return
        yield pos, h
        pos += size


def valid_prefix_end(buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True) -> int:
    """The position where the run of valid batches starting at ``pos`` ends."""
    end = pos
    for p, h in iter_batches(buf, pos, verify_crc=verify_crc):
        end = p + h.size
    return end


# --------------------------------------------------------------------------------------------
# Record-level (internal topics, compaction, ListOffsets, tests)


class _Scratch(threading.local):
    """A per-thread output buffer reused across decompressions (no allocation and no zero-fill
    per batch); it grows to the largest payload seen, up to ``_SCRATCH_MAX``."""

    buf = bytearray(1 << 20)


_SCRATCH_MAX = 8 * 1024 * 1024
_scratch = _Scratch()


def decompress(
    codec: int, data: memoryview | bytes, limit: int = DEFAULT_MAX_UNCOMPRESSED_BYTES, *, reuse: bool = False
) -> memoryview:
    """The records section of a compressed batch, decompressed into at most ``limit`` bytes.

    Decompression writes into a buffer of fixed size, so a bomb (33 KB of zstd that expands to
    1 GB) costs at most ``limit`` bytes and the time to fill them: the buffer starts at 1 MiB
    (or eight times the input) and grows eight-fold up to ``limit``. With ``reuse`` the result
    lives in this thread's scratch buffer and is valid only until the next ``reuse`` call in the
    thread (the produce path: walked, then dropped). Raises MessageTooLarge when the data
    expands beyond ``limit``, CorruptMessage when it does not decompress, InvalidRecord for an
    unknown codec.
    """
    if codec == COMPRESSION_SNAPPY:
        return _snappy(data, limit)
    if codec == COMPRESSION_GZIP:
        into = cramjam.gzip.decompress_into
    elif codec == COMPRESSION_LZ4:
        into = cramjam.lz4.decompress_into
    elif codec == COMPRESSION_ZSTD:
        into = cramjam.zstd.decompress_into
    else:
        raise InvalidRecord(f"record batch compression codec {codec} unknown")
    size = min(limit, max(1 << 20, _FIRST_GUESS * len(data)))
    while True:
        if reuse and size <= _SCRATCH_MAX:
            if len(_scratch.buf) < size:
                _scratch.buf = bytearray(size)
            out = _scratch.buf
            view = memoryview(out)[:size]
        else:
            out = bytearray(size)
            view = memoryview(out)
        try:
            n = into(data, view)
        except cramjam.DecompressionError as e:
            if not any(s in str(e) for s in _OVERFLOW):
                raise CorruptMessage(f"record batch payload does not decompress with codec {codec}: {e}") from None
            if size >= limit:
                raise MessageTooLarge(
                    f"record batch of {len(data)} compressed bytes expands beyond {limit} bytes "
                    "(message.max.uncompressed.bytes)"
                ) from None
            size = min(limit, size * 8)
            continue
        return view[:n]


def _snappy(data: memoryview | bytes, limit: int) -> memoryview:
    """Raw snappy (librdkafka) or xerial-framed snappy (Java clients); the decompressed length is
    announced before each block, so it is checked before anything is decompressed."""
    blocks: list[memoryview | bytes] = []
    if bytes(data[:8]) == _XERIAL_MAGIC and len(data) >= 16:
        pos, n = 16, len(data)
        while pos < n:
            if n - pos < 4:
                raise CorruptMessage("xerial snappy stream truncated in a block length")
            (length,) = _LENGTH.unpack_from(data, pos)
            pos += 4
            if length < 0 or length > n - pos:
                raise CorruptMessage(f"xerial snappy block of {length} bytes, {n - pos} left")
            blocks.append(data[pos : pos + length])
            pos += length
    else:
        blocks.append(data)
    total = 0
    out: list[memoryview] = []
    try:
        for block in blocks:
            size = cramjam.snappy.decompress_raw_len(block)
            total += size
            if total > limit:
                raise MessageTooLarge(
                    f"snappy record batch expands beyond {limit} bytes (message.max.uncompressed.bytes)"
                )
            buf = bytearray(size)
            written = cramjam.snappy.decompress_raw_into(block, buf)
            out.append(memoryview(buf)[:written])
    except cramjam.DecompressionError as e:
        raise CorruptMessage(f"record batch payload does not decompress with snappy: {e}") from None
    return out[0] if len(out) == 1 else memoryview(b"".join(out))


def _compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        # Kafka's LZ4 reader rejects linked blocks (KIP-57).
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise ValueError(f"compression codec {codec} unknown")


def _encode_varint(value: int, out: bytearray) -> None:
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _bytes_field(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptMessage(f"field length {length} is negative")
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptMessage(f"field of {length} bytes runs past the end of the record data")
    return bytes(buf[pos:end]), end


def iter_records(
    buf: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> Iterator[Record]:
    """Decode the records of the single batch at the start of ``buf`` (decompressing if needed,
    into at most ``max_uncompressed`` bytes).

    Timestamps of a LogAppendTime batch are its maxTimestamp. Raises CorruptMessage on any
    malformation (CRC when ``verify_crc``, lengths, varints, record count mismatch, codec
    errors, a payload expanding beyond the bound); never another exception type. Not for the
    produce/fetch path.
    """
    h = parse_header(buf)
    size = h.size
    if size < BATCH_HEADER_SIZE or size > len(buf):
        raise CorruptMessage(f"record batch of {size} bytes, {len(buf)} available")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if verify_crc:
        actual = _crc32c.crc32c(mv[CRC_START:size])
        if actual != h.crc:
            raise CorruptMessage(f"record batch CRC mismatch: header says {h.crc:#010x}, computed {actual:#010x}")
    data: memoryview = mv[BATCH_HEADER_SIZE:size]
    if h.compression != COMPRESSION_NONE:
        try:
            data = decompress(h.compression, data, max_uncompressed)
        except (MessageTooLarge, InvalidRecord) as e:
            raise CorruptMessage(str(e)) from None
    log_append = h.attributes & TIMESTAMP_TYPE_BIT
    return _records(data, h, bool(log_append))


def _records(data: memoryview, h: BatchHeader, log_append: bool) -> Iterator[Record]:
    pos, n = 0, len(data)
    base_offset, base_ts = h.base_offset, h.base_timestamp
    count = 0
    try:
        while pos < n:
            length, pos = _varint(data, pos)
            end = pos + length
            if length < 6 or end > n:
                raise CorruptMessage(f"record {count}: length {length} invalid with {n - pos} bytes left")
            pos += 1  # attributes: unused
            ts_delta, pos = _varint(data, pos)
            offset_delta, pos = _varint(data, pos)
            key, pos = _bytes_field(data, pos)
            value, pos = _bytes_field(data, pos)
            n_headers, pos = _varint(data, pos)
            if n_headers < 0:
                raise CorruptMessage(f"record {count}: header count {n_headers}")
            headers = []
            for _ in range(n_headers):
                hkey, pos = _bytes_field(data, pos)
                if hkey is None:
                    raise CorruptMessage(f"record {count}: null header key")
                hval, pos = _bytes_field(data, pos)
                headers.append((hkey.decode("utf-8", "surrogateescape"), hval))
            if pos != end:
                raise CorruptMessage(f"record {count}: length {length} but {length + pos - end} bytes decoded")
            count += 1
            if count > h.records_count:
                raise CorruptMessage(f"record batch holds more records than its count {h.records_count}")
            yield Record(
                base_offset + offset_delta,
                h.max_timestamp if log_append else base_ts + ts_delta,
                key,
                value,
                tuple(headers),
            )
    except ValueError as exc:  # from the varint reader: the data ends inside one, or one is too long
        raise CorruptMessage(f"record {count}: {exc}") from None
    if count != h.records_count:
        raise CorruptMessage(f"record batch count says {h.records_count} records, {count} found")


def _encode_records(records: Sequence[tuple], base_ts: int) -> bytes:
    out = bytearray()
    body = bytearray()
    for i, rec in enumerate(records):
        key, value, headers = rec[0], rec[1], rec[2]
        ts = rec[3] if len(rec) > 3 else base_ts
        body.clear()
        body.append(0)
        _encode_varint(ts - base_ts, body)
        _encode_varint(rec[4] if len(rec) > 4 else i, body)  # 5th element: offset delta (compaction)
        for field in (key, value):
            if field is None:
                _encode_varint(-1, body)
            else:
                _encode_varint(len(field), body)
                body += field
        _encode_varint(len(headers), body)
        for hk, hv in headers:
            hkb = hk.encode("utf-8", "surrogateescape") if isinstance(hk, str) else hk
            _encode_varint(len(hkb), body)
            body += hkb
            if hv is None:
                _encode_varint(-1, body)
            else:
                _encode_varint(len(hv), body)
                body += hv
        _encode_varint(len(body), out)
        out += body
    return bytes(out)


def _assemble(
    payload: bytes,
    *,
    base_offset: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    buf = bytearray(BATCH_HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        records_count,
    )
    buf[BATCH_HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, 17, _crc32c.crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def build_batch(
    records: Sequence[tuple],
    *,
    base_offset: int = 0,
    timestamp_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    compression: int = COMPRESSION_NONE,
) -> bytes:
    """A v2 batch (correct CRC) of ``records``: ``(key, value, headers)`` tuples, optionally with a
    4th element, the record's timestamp (default ``timestamp_ms``). ``headers`` is a sequence of
    ``(str | bytes, bytes | None)``. Snappy output uses raw framing (as librdkafka does).
    Raises ValueError for an empty ``records`` or an unknown codec.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    payload = _encode_records(records, timestamp_ms)
    if compression != COMPRESSION_NONE:
        payload = _compress(compression, payload)
    max_ts = max(rec[3] if len(rec) > 3 else timestamp_ms for rec in records)
    return _assemble(
        payload,
        base_offset=base_offset,
        attributes=(compression & COMPRESSION_MASK) | (TRANSACTIONAL_BIT if transactional else 0),
        last_offset_delta=len(records) - 1,
        base_timestamp=timestamp_ms,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )


def build_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker: a transactional control batch with one COMMIT or ABORT record,
    never compressed, base sequence -1 (markers carry no sequence)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return _assemble(
        _encode_records([(key, value, ())], timestamp_ms),
        base_offset=base_offset,
        attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
        last_offset_delta=0,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        records_count=1,
    )


def read_control_marker(buf: bytes | bytearray | memoryview) -> ControlMarker:
    """The marker carried by a control batch. Raises InvalidRecord if the batch is not a control
    batch or its record is not a COMMIT/ABORT marker, CorruptMessage if it does not decode."""
    h = parse_header(buf)
    if not h.is_control:
        raise InvalidRecord(f"batch at offset {h.base_offset} is not a control batch")
    for rec in iter_records(buf):
        if rec.key is None or len(rec.key) < 4 or rec.value is None or len(rec.value) < 6:
            raise InvalidRecord(f"control record at offset {rec.offset} is not a transaction marker")
        _version, ctype = _CONTROL_KEY.unpack_from(rec.key)
        if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise InvalidRecord(f"control record at offset {rec.offset} has type {ctype}, not COMMIT/ABORT")
        _vversion, epoch = _CONTROL_VALUE.unpack_from(rec.value)
        return ControlMarker(ctype == CONTROL_COMMIT, epoch)
    raise InvalidRecord(f"control batch at offset {h.base_offset} has no record")


def filter_batch(
    buf: bytes | bytearray | memoryview, keep: Callable[[Record], bool], *, keep_empty: bool = False
) -> bytes | None:
    """Compaction: the batch at the start of ``buf`` with only the records ``keep`` accepts.

    Everything else stays as written: base offset and lastOffsetDelta (so the batch still spans
    its original offsets and the producer's sequence range, as Kafka's cleaner keeps them), base
    and max timestamps, producer id, epoch and base sequence, attributes (compression codec,
    transactional flag); each kept record keeps its offset and timestamp. Returns the batch's own
    bytes when every record is kept; when none is, None — or, with ``keep_empty``, the header
    alone (0 records, uncompressed), which Kafka's cleaner keeps for a producer's last batch so
    the producer's state survives. Raises CorruptMessage if the batch does not decode. Not for
    control batches (ValueError).
    """
    h = parse_header(buf)
    if h.is_control:
        raise ValueError(f"control batch at offset {h.base_offset} cannot be filtered")
    recs = list(iter_records(buf))
    kept = [r for r in recs if keep(r)]
    if len(kept) == len(recs):
        return bytes(buf[: h.size])
    if not kept and not keep_empty:
        return None
    attributes = h.attributes if kept else h.attributes & ~COMPRESSION_MASK
    payload = _encode_records(
        [(r.key, r.value, r.headers, r.timestamp, r.offset - h.base_offset) for r in kept], h.base_timestamp
    )
    if kept and h.compression != COMPRESSION_NONE:
        payload = _compress(h.compression, payload)
    return _assemble(
        payload,
        base_offset=h.base_offset,
        attributes=attributes,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        records_count=len(kept),
        partition_leader_epoch=h.partition_leader_epoch,
    )


def record_with_timestamp(buf: bytes | bytearray | memoryview, timestamp: int, max_uncompressed: int,
                          min_offset: int = 0) -> int:
    """The offset of the first record at or after ``min_offset`` whose timestamp is
    ``timestamp`` in the single batch at the start of ``buf`` (ListOffsets MAX_TIMESTAMP: the
    record, not its batch); the batch's base offset when none is. Raises CorruptMessage."""
    base = -1
    for rec in iter_records(buf, max_uncompressed=max_uncompressed):
        if base < 0:
            base = rec.offset
        if rec.timestamp == timestamp and rec.offset >= min_offset:
            return rec.offset
    return base if base >= 0 else parse_header(bytes(buf[:BATCH_HEADER_SIZE])).base_offset
