"""Record batch v2: validation, offset rewrite, iteration, builders (R1, R15, R22)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import records as R
from oncelog.protocol.errors import (
    CorruptMessage,
    InvalidRecord,
    KafkaError,
    MessageTooLarge,
    UnsupportedForMessageFormat,
)

CODECS = [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD]
BIG = 1 << 30

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))
header_st = st.tuples(st.text(max_size=10), maybe_bytes)
record_st = st.tuples(maybe_bytes, maybe_bytes, st.lists(header_st, max_size=3))


def _batch(n=3, **kw):
    kw.setdefault("timestamp_ms", 1_700_000_000_000)
    return R.build_batch([(b"k%d" % i, b"value-%d" % i, ()) for i in range(n)], **kw)


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, __import__("crc32c").crc32c(memoryview(buf)[21:]))
    return bytes(buf)


# -- roundtrip ------------------------------------------------------------------------------


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(record_st, min_size=1, max_size=20),
    codec=st.sampled_from(CODECS),
    ts=st.integers(0, 2**40),
    base=st.integers(0, 2**40),
    epoch=st.integers(-1, 1000),
)
def test_build_validate_iterate_roundtrip(recs, codec, ts, base, epoch):
    buf = R.build_batch(recs, timestamp_ms=ts, compression=codec, producer_id=7, producer_epoch=3, base_sequence=11)
    h = R.validate_produce_batch(buf, BIG)
    assert h.size == len(buf) and h.compression == codec and h.records_count == len(recs)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 11)
    assert h.last_sequence == 11 + len(recs) - 1
    moved = R.with_base_offset(buf, base, epoch)
    h2 = R.validate_produce_batch(moved, BIG)  # CRC still valid: the rewrite is outside it
    assert h2.base_offset == base and h2.partition_leader_epoch == epoch and h2.crc == h.crc
    out = list(R.iter_records(moved))
    assert [r.offset for r in out] == list(range(base, base + len(recs)))
    assert [(r.key, r.value, list(r.headers)) for r in out] == [(k, v, hs) for k, v, hs in recs]
    assert all(r.timestamp == ts for r in out)


def test_per_record_timestamps_and_max_timestamp():
    buf = R.build_batch([(None, b"a", (), 50), (None, b"b", (), 80), (None, b"c", (), 70)], timestamp_ms=50)
    h = R.parse_header(buf)
    assert (h.base_timestamp, h.max_timestamp) == (50, 80)
    assert [r.timestamp for r in R.iter_records(buf)] == [50, 80, 70]


def test_log_append_time_records_take_max_timestamp():
    buf = bytearray(R.build_batch([(None, b"a", (), 50), (None, b"b", (), 80)], timestamp_ms=50))
    struct.pack_into(">h", buf, 21, R.TIMESTAMP_TYPE_BIT)
    buf = _recrc(buf)
    assert R.parse_header(buf).timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in R.iter_records(buf)] == [80, 80]


def test_header_properties():
    buf = _batch(5, base_offset=100, transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    h = R.parse_header(buf)
    assert h.last_offset == 104 and h.next_offset == 105 and h.is_transactional and not h.is_control
    assert h.timestamp_type == R.TIMESTAMP_CREATE_TIME


def test_last_sequence_wraps_like_kafka():
    buf = _batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert R.parse_header(buf).last_sequence == 0


def test_control_batch_roundtrip():
    for commit in (True, False):
        buf = R.build_control_batch(commit=commit, producer_id=9, producer_epoch=2, coordinator_epoch=5,
                                    timestamp_ms=123, base_offset=40)
        h = R.parse_header(buf)
        assert h.is_control and h.is_transactional and h.compression == 0 and h.base_sequence == -1
        assert (h.producer_id, h.producer_epoch, h.records_count) == (9, 2, 1)
        assert R.read_control_marker(buf) == R.ControlMarker(commit, 5)
        [rec] = R.iter_records(buf)
        assert rec.offset == 40 and rec.key == struct.pack(">hh", 0, 1 if commit else 0)
    with pytest.raises(InvalidRecord):
        R.read_control_marker(_batch())


def test_with_base_offset_accepts_memoryview_and_bytearray():
    buf = _batch()
    for b in (bytearray(buf), memoryview(buf)):
        assert R.with_base_offset(b, 7) == R.with_base_offset(buf, 7)
    assert R.offset_prefix(buf, 7) + buf[16:] == R.with_base_offset(buf, 7)


# -- produce validation (R22) ---------------------------------------------------------------


def test_bit_flip_after_offset_21_is_corrupt_message():
    buf = _batch(4, compression=R.COMPRESSION_GZIP)
    for pos in range(17, len(buf)):
        for bit in range(8):
            bad = bytearray(buf)
            bad[pos] ^= 1 << bit
            with pytest.raises(CorruptMessage):
                R.validate_produce_batch(bytes(bad), BIG)


def test_bit_flip_anywhere_raises_kafka_error_or_is_harmless():
    buf = _batch(2)
    for pos in range(len(buf)):
        for bit in range(8):
            bad = bytearray(buf)
            bad[pos] ^= 1 << bit
            try:
                h = R.validate_produce_batch(bytes(bad), BIG)
            except KafkaError:
                continue
            assert pos < 16 and pos not in range(8, 12)  # base offset / leader epoch: ignored
            assert h.crc == R.parse_header(buf).crc


@settings(max_examples=30)
@given(codec=st.sampled_from(CODECS), data=st.data())
def test_truncations_raise_kafka_errors_only(codec, data):
    buf = R.build_batch([(b"k", b"v" * 300, [("h", b"x")])] * 3, timestamp_ms=1, compression=codec)
    cut = data.draw(st.integers(0, len(buf) - 1))
    with pytest.raises(KafkaError):
        R.validate_produce_batch(buf[:cut], BIG)
    with pytest.raises(KafkaError):
        list(R.iter_records(buf[:cut]))
    assert list(R.iter_batches(buf[:cut])) == []
    assert R.valid_prefix_end(buf[:cut]) == 0


@settings(max_examples=200)
@given(junk=st.binary(max_size=300))
def test_garbage_never_raises_anything_but_kafka_errors(junk):
    for fn in (lambda b: R.validate_produce_batch(b, BIG), lambda b: list(R.iter_records(b, verify_crc=False)),
               R.parse_header, R.read_control_marker):
        try:
            fn(junk)
        except KafkaError:
            pass
    list(R.iter_batches(junk))


@settings(max_examples=100)
@given(codec=st.sampled_from(CODECS), pos=st.integers(61, 10_000), xor=st.integers(1, 255))
def test_corrupt_payload_without_crc_check_raises_only_corrupt_message(codec, pos, xor):
    buf = bytearray(R.build_batch([(b"k", b"v" * 100, [("h", b"x")])] * 4, timestamp_ms=1, compression=codec))
    buf[pos % len(buf) if pos % len(buf) >= 61 else 61] ^= xor
    try:
        list(R.iter_records(bytes(buf), verify_crc=False))
    except CorruptMessage:
        pass


def test_empty_and_short():
    with pytest.raises(InvalidRecord):
        R.validate_produce_batch(b"", BIG)
    with pytest.raises(CorruptMessage):
        R.validate_produce_batch(b"\0" * 10, BIG)
    with pytest.raises(CorruptMessage):
        R.parse_header(_batch()[:60])


@pytest.mark.parametrize("magic,exc", [(0, UnsupportedForMessageFormat), (1, UnsupportedForMessageFormat),
                                       (3, InvalidRecord), (0xFF, InvalidRecord)])
def test_magic_other_than_2(magic, exc):
    buf = bytearray(_batch())
    buf[16] = magic
    with pytest.raises(exc):
        R.validate_produce_batch(bytes(buf), BIG)
    with pytest.raises(exc):
        R.parse_header(bytes(buf))


def test_two_batches_is_invalid_record_and_trailing_junk_is_corrupt():
    one = _batch()
    with pytest.raises(InvalidRecord, match="exactly one"):
        R.validate_produce_batch(one + one, BIG)
    with pytest.raises(CorruptMessage):
        R.validate_produce_batch(one + b"\0" * 5, BIG)


def test_message_too_large_names_both_sizes():
    buf = _batch(10)
    with pytest.raises(MessageTooLarge, match=f"{len(buf)} bytes.*{len(buf) - 1}"):
        R.validate_produce_batch(buf, len(buf) - 1)
    assert R.validate_produce_batch(buf, len(buf)).size == len(buf)


def test_crc_message_names_expected_and_actual():
    bad = bytearray(_batch())
    bad[-1] ^= 1
    with pytest.raises(CorruptMessage, match="header says 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}"):
        R.validate_produce_batch(bytes(bad), BIG)


def _patch(buf: bytes, fmt: str, at: int, value: int) -> bytes:
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return _recrc(b)


def test_count_and_delta_rules():
    buf = _batch(3)
    with pytest.raises(InvalidRecord, match="lastOffsetDelta 5"):
        R.validate_produce_batch(_patch(buf, ">i", 23, 5), BIG)
    with pytest.raises(InvalidRecord, match="recordsCount 0"):
        R.validate_produce_batch(_patch(buf, ">i", 57, 0), BIG)


def test_clients_may_not_write_control_records():
    buf = R.build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0)
    with pytest.raises(InvalidRecord, match="control"):
        R.validate_produce_batch(buf, BIG)


def test_unknown_codec_and_missing_sequence():
    buf = _batch()
    with pytest.raises(InvalidRecord, match="codec 5"):
        R.validate_produce_batch(_patch(buf, ">h", 21, 5), BIG)
    with pytest.raises(InvalidRecord, match="sequence"):
        R.validate_produce_batch(_batch(producer_id=4, producer_epoch=0, base_sequence=-1), BIG)


# -- iter_batches ---------------------------------------------------------------------------


def test_iter_batches_stops_at_truncated_tail_and_reports_end():
    a, b, c = _batch(1, base_offset=0), _batch(2, base_offset=1), _batch(3, base_offset=3)
    buf = a + b + c
    got = list(R.iter_batches(buf))
    assert [(p, h.base_offset) for p, h in got] == [(0, 0), (len(a), 1), (len(a) + len(b), 3)]
    for cut in range(len(a) + len(b), len(buf)):
        assert R.valid_prefix_end(buf[:cut]) == len(a) + len(b)
    bad = bytearray(buf)
    bad[len(a) + 30] ^= 4
    assert R.valid_prefix_end(bytes(bad)) == len(a)
    assert R.valid_prefix_end(bytes(bad), verify_crc=False) == len(buf)
    assert [p for p, _ in R.iter_batches(buf, len(a))] == [len(a), len(a) + len(b)]


# -- cross-checks with real client encoders -------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_encoded_batches_parse_and_validate(codec):
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=1, producer_id=77,
                                  producer_epoch=4, base_sequence=9, batch_size=1 << 20)
    for i in range(20):
        b.append(i, timestamp=5000 + i, key=b"key-%d" % i, value=b"v" * i, headers=[("h", b"%d" % i)])
    buf = bytes(b.build())
    h = R.validate_produce_batch(buf, BIG)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (77, 4, 9, True)
    assert h.compression == codec and h.records_count == 20 and h.max_timestamp == 5019
    recs = list(R.iter_records(R.with_base_offset(buf, 1000)))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (1000 + i, 5000 + i, b"key-%d" % i, b"v" * i, (("h", b"%d" % i),)) for i in range(20)
    ]


@pytest.mark.parametrize("codec", [R.COMPRESSION_NONE, R.COMPRESSION_GZIP])
def test_kafka_python_encoded_batches_parse_and_validate(codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(10):
        b.append(i, timestamp=100 + i, key=None, value=b"x%d" % i, headers=[])
    buf = bytes(b.build())
    h = R.validate_produce_batch(buf, BIG)
    assert h.compression == codec and h.records_count == 10
    assert [r.value for r in R.iter_records(buf)] == [b"x%d" % i for i in range(10)]


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_in_aiokafka(codec):
    from aiokafka.record.default_records import DefaultRecordBatch

    buf = R.with_base_offset(
        R.build_batch([(b"k%d" % i, b"v%d" % i, [("a", b"b")]) for i in range(7)], timestamp_ms=42,
                      compression=codec, producer_id=3, producer_epoch=1, base_sequence=0, transactional=True),
        500,
    )
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert batch.base_offset == 500 and batch.is_transactional and batch.producer_id == 3
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in batch] == [
        (500 + i, b"k%d" % i, b"v%d" % i, [("a", b"b")]) for i in range(7)
    ]


def test_our_control_batch_decodes_in_aiokafka():
    from aiokafka.record.default_records import DefaultRecordBatch

    buf = R.build_control_batch(commit=False, producer_id=3, producer_epoch=1, coordinator_epoch=2,
                                timestamp_ms=1)
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional


def test_record_with_timestamp_finds_the_record_not_the_batch():
    """ListOffsets MAX_TIMESTAMP (issue 16): the first record carrying the timestamp, at or after
    the log start; the base offset when none does (a LogAppendTime batch: its first record)."""
    recs = [(None, b"a", (), 50), (None, b"b", (), 80), (None, b"c", (), 80), (None, b"d", (), 70)]
    for codec in (R.COMPRESSION_NONE, R.COMPRESSION_GZIP):
        buf = R.build_batch(recs, timestamp_ms=50, base_offset=100, compression=codec)
        assert R.record_with_timestamp(buf, 80, 1 << 20) == 101
        assert R.record_with_timestamp(buf, 80, 1 << 20, min_offset=102) == 102
        assert R.record_with_timestamp(buf, 999, 1 << 20) == 100
