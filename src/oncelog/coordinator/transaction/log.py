"""``__transaction_state`` records: Kafka's TransactionLogKey / TransactionLogValue schemas.

Key (version 0): int16 version, string transactional_id.
Value (version 1, flexible, as Kafka 3.x writes): int64 producer_id, int16 producer_epoch,
int32 transaction_timeout_ms, int8 transaction_status, nullable compact array of
{compact string topic, compact array int32 partition_ids, tagged fields},
int64 last_update_timestamp_ms, int64 start_timestamp_ms, tagged fields:
tag 0 PreviousProducerId (int64, Kafka's), tag 100 LastProducerEpoch (int16, ours; Kafka's
readers skip unknown tags), tags 101/102 KeptTxnProducerId (int64) / KeptTxnProducerEpoch
(int16), ours, written only while a prepared two-phase-commit transaction is kept across a new
producer instance (KIP-939 ``keep_prepared_txn``; absent: -1). A null value is a tombstone: the
transactional.id expired (R21).

Two-phase commit (KIP-939) is not a field: as in Kafka, a transactional id whose producer
enabled 2PC has TransactionTimeoutMs = 2147483647 (``TWO_PC_TIMEOUT_MS``, Kafka's
``isDistributedTwoPhaseCommitTxn``), so the exemption from the timeout round-trips through the
schema's own field and survives a restart or a move of the coordinator unchanged.

Version 0 values (non-flexible) are read too, so a log written by an older writer loads.
Primitive encoders and decoders are kio's (generated from Kafka's schemas' primitive types).

Decoding contract: ``decode_key`` and ``decode_value`` return a value for well-formed input and
raise ``TxnLogFormatError`` (a ValueError) for anything else — truncated data, bytes after the
last field, an unknown key or value version, an unknown transaction state — never a reader's own
exception type; the loader skips such records (R22).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from kio.serial import readers as r
from kio.serial import writers as w
from kio.serial.errors import SerialError

from oncelog.coordinator.transaction.state import TxnState
from oncelog.types import ProducerEpoch, ProducerId, TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 1
_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_LAST_PRODUCER_EPOCH = 100
_TAG_KEPT_PRODUCER_ID = 101
_TAG_KEPT_PRODUCER_EPOCH = 102

#: transaction.timeout.ms of a transactional id with two-phase commit enabled (Int.MaxValue, as
#: Kafka writes it): such transactions are never aborted on timeout.
TWO_PC_TIMEOUT_MS = 2_147_483_647


#: What kio's readers and our own checks raise on malformed bytes.
_DECODE_ERRORS = (SerialError, ValueError, OverflowError, IndexError, struct.error, UnicodeDecodeError)


class TxnLogFormatError(ValueError):
    """A ``__transaction_state`` key or value that does not decode."""


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """The whole state of one transactional.id, as written to the transaction log."""

    producer_id: ProducerId
    last_producer_id: ProducerId
    producer_epoch: ProducerEpoch
    last_producer_epoch: ProducerEpoch
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    #: the (producer id, epoch) the kept transaction's data was written with, while a prepared
    #: 2PC transaction outlives its producer instance (InitProducerId keep_prepared_txn); -1 else
    kept_producer_id: ProducerId = ProducerId(-1)
    kept_producer_epoch: ProducerEpoch = ProducerEpoch(-1)

    @property
    def is_2pc(self) -> bool:
        """Two-phase commit is enabled for this id: its transactions never time out (KIP-939)."""
        return self.timeout_ms == TWO_PC_TIMEOUT_MS

    @property
    def kept(self) -> bool:
        """A prepared transaction of an earlier producer instance is kept (keep_prepared_txn)."""
        return self.kept_producer_id >= 0


def encode_key(transactional_id: str) -> bytes:
    buf = io.BytesIO()
    w.write_int16(buf, KEY_VERSION)
    w.write_legacy_string(buf, transactional_id)
    return buf.getvalue()


def decode_key(data: bytes) -> str:
    """The transactional.id of a record key. Raises TxnLogFormatError (see the module doc)."""
    try:
        version, n = r.read_int16(data, 0)
        if version != KEY_VERSION:
            raise TxnLogFormatError(f"transaction log key version {version} is unknown")
        tid, size = r.read_legacy_string(data, n)
    except TxnLogFormatError:
        raise
    except _DECODE_ERRORS as e:
        raise TxnLogFormatError(f"transaction log key of {len(data)} bytes does not decode: {_describe(e)}") from None
    if n + size != len(data):
        raise TxnLogFormatError(f"transaction log key: {len(data) - n - size} bytes after the transactional.id")
    return tid


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def encode_value(rec: TxnRecord) -> bytes:
    buf = io.BytesIO()
    w.write_int16(buf, VALUE_VERSION)
    w.write_int64(buf, rec.producer_id)
    w.write_int16(buf, rec.producer_epoch)
    w.write_int32(buf, rec.timeout_ms)
    w.write_int8(buf, int(rec.state))
    by_topic: dict[str, list[int]] = {}
    for tp in rec.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    w.write_unsigned_varint(buf, len(by_topic) + 1)
    for topic in sorted(by_topic):
        w.write_compact_string(buf, topic)
        parts = sorted(by_topic[topic])
        w.write_unsigned_varint(buf, len(parts) + 1)
        for p in parts:
            w.write_int32(buf, p)
        w.write_unsigned_varint(buf, 0)  # no tagged fields
    w.write_int64(buf, rec.last_update_ms)
    w.write_int64(buf, rec.start_ms)
    tags = io.BytesIO()
    _write_tag(tags, _TAG_PREVIOUS_PRODUCER_ID, struct.pack(">q", rec.last_producer_id))
    _write_tag(tags, _TAG_LAST_PRODUCER_EPOCH, struct.pack(">h", rec.last_producer_epoch))
    ntags = 2
    if rec.kept:
        _write_tag(tags, _TAG_KEPT_PRODUCER_ID, struct.pack(">q", rec.kept_producer_id))
        _write_tag(tags, _TAG_KEPT_PRODUCER_EPOCH, struct.pack(">h", rec.kept_producer_epoch))
        ntags += 2
    w.write_unsigned_varint(buf, ntags)
    buf.write(tags.getvalue())
    return buf.getvalue()


def _write_tag(buf: io.BytesIO, tag: int, payload: bytes) -> None:
    w.write_unsigned_varint(buf, tag)
    w.write_unsigned_varint(buf, len(payload))
    buf.write(payload)


def decode_value(data: bytes) -> TxnRecord:
    """The record of a non-null value. Raises TxnLogFormatError (see the module doc)."""
    try:
        return _decode_value(data)
    except TxnLogFormatError:
        raise
    except _DECODE_ERRORS as e:
        raise TxnLogFormatError(f"transaction log value of {len(data)} bytes does not decode: {_describe(e)}") from None


def _decode_value(data: bytes) -> TxnRecord:
    pos = 0

    def take(reader):  # type: ignore[no-untyped-def]
        nonlocal pos
        value, n = reader(data, pos)
        pos += n
        return value

    version = take(r.read_int16)
    if version not in (0, 1):
        raise TxnLogFormatError(f"transaction log value version {version} is unknown")
    flexible = version >= 1
    pid = take(r.read_int64)
    epoch = take(r.read_int16)
    timeout = take(r.read_int32)
    status = take(r.read_int8)
    if status not in _STATES:
        raise TxnLogFormatError(f"transaction state {status} is unknown")
    partitions: set[TopicPartition] = set()
    count = take(r.read_compact_array_length if flexible else r.read_legacy_array_length)
    for _ in range(count or 0):
        topic = take(r.read_compact_string if flexible else r.read_legacy_string)
        n = take(r.read_compact_array_length if flexible else r.read_legacy_array_length)
        for _ in range(n or 0):
            partitions.add(TopicPartition(topic, take(r.read_int32)))
        if flexible:
            _read_tags(data, take)
    last_update = take(r.read_int64)
    start = take(r.read_int64)
    last_pid, last_epoch, kept_pid, kept_epoch = -1, -1, -1, -1
    if flexible:
        for tag, payload in _read_tags(data, take):
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                (last_pid,) = struct.unpack(">q", payload)
            elif tag == _TAG_LAST_PRODUCER_EPOCH:
                (last_epoch,) = struct.unpack(">h", payload)
            elif tag == _TAG_KEPT_PRODUCER_ID:
                (kept_pid,) = struct.unpack(">q", payload)
            elif tag == _TAG_KEPT_PRODUCER_EPOCH:
                (kept_epoch,) = struct.unpack(">h", payload)
    if pos != len(data):
        raise TxnLogFormatError(f"transaction log value: {len(data) - pos} bytes after the last field")
    return TxnRecord(pid, last_pid, epoch, last_epoch, timeout, TxnState(status), frozenset(partitions), start, last_update,
                     kept_pid, kept_epoch)


_STATES = frozenset(int(s) for s in TxnState)


def _read_tags(data: bytes, take):  # type: ignore[no-untyped-def]
    out = []
    for _ in range(take(r.read_unsigned_varint)):
        tag = take(r.read_unsigned_varint)
        size = take(r.read_unsigned_varint)

        def payload(d: bytes, p: int) -> tuple[bytes, int]:
            if p + size > len(d):
                raise TxnLogFormatError(f"tagged field {tag} of {size} bytes runs past the {len(d)}-byte value")
            return bytes(d[p : p + size]), size

        out.append((tag, take(payload)))
    return out
