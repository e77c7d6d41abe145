"""Produce validates every record (R22, issue 12 items 7 and 8): the C walker against a plain
Python oracle, and validate_produce_batch on the batches a hostile client sent."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import _recordwalk
from oncelog.protocol import records as R
from oncelog.protocol.errors import CorruptMessage, InvalidRecord, MessageTooLarge


# --- the oracle: Kafka's DefaultRecord.readFrom rules, written out plainly -------------------

def _zigzag(buf: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    raw = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError("truncated")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5 and raw > 0xFFFFFFFF:
                raise ValueError("too long")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise ValueError("too long")


def _sized(buf: bytes, pos: int, end: int, min_len: int) -> tuple[int, int]:
    n, pos = _zigzag(buf, pos, end, 5)
    if n < min_len:
        raise ValueError("negative length")
    if n > 0:
        if n > end - pos:
            raise ValueError("truncated")
        pos += n
    return n, pos


def oracle(buf: bytes, count: int, base: int = 0):
    pos, n = 0, len(buf)
    null_keys, best, best_i = 0, 0, -1
    stamps: list[tuple[int, int]] = []  # (record timestamp, index), Kafka's NO_TIMESTAMP (-1) left out
    for i in range(count):
        if pos >= n:
            raise ValueError("ends")
        length, pos = _zigzag(buf, pos, n, 5)
        if length < 0 or length > n - pos:
            raise ValueError("length")
        end = pos + length
        if pos >= end:
            raise ValueError("attributes")
        pos += 1
        ts, pos = _zigzag(buf, pos, end, 10)
        od, pos = _zigzag(buf, pos, end, 5)
        if od != i:
            raise ValueError("offset delta")
        klen, pos = _sized(buf, pos, end, -1)
        null_keys += klen == -1
        _, pos = _sized(buf, pos, end, -1)
        hcount, pos = _zigzag(buf, pos, end, 5)
        if hcount < 0 or hcount > (end - pos) // 2:
            raise ValueError("header count")
        for _ in range(hcount):
            _, pos = _sized(buf, pos, end, 0)
            _, pos = _sized(buf, pos, end, -1)
        if pos != end:
            raise ValueError("size mismatch")
        if best_i < 0 or ts > best:
            best, best_i = ts, i
        absolute = (base + ts + 2**63) % 2**64 - 2**63  # Java's long addition wraps
        if absolute != -1:
            stamps.append((absolute, i))
    if pos != n:
        raise ValueError("trailing bytes")
    if best_i < 0:
        return None
    lo = min(stamps, default=(0, -1))  # the first record of the lowest timestamp
    hi = min(stamps, key=lambda s: (-s[0], s[1]), default=(0, -1))
    return (null_keys, best, best_i, *lo, *hi)


def c_walk(buf: bytes, count: int, base: int = 0):
    try:
        return _recordwalk.walk(buf, count, base)
    except ValueError:
        raise ValueError("c") from None


record = st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=20),
                   st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
                   st.integers(0, 2**40))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(record, min_size=1, max_size=6), data=st.data(),
       base=st.sampled_from([0, -1, -2**40, 2**62, 2**63 - 1, -2**63]))
def test_c_walker_agrees_with_the_oracle_on_mutated_records(recs: list, data: st.DataObject, base: int) -> None:
    batch = R.build_batch([(k, v, h, ts) for k, v, h, ts in recs], timestamp_ms=0)
    payload = bytearray(batch[R.BATCH_HEADER_SIZE:])
    count = len(recs)
    expected = oracle(bytes(payload), count, base)
    assert c_walk(bytes(payload), count, base) == expected
    assert expected[0] == sum(k is None for k, _, _, _ in recs)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFE, 0xFF, data.draw(st.integers(0, 255))]))
    if data.draw(st.booleans()):
        payload = payload[: data.draw(st.integers(0, len(payload)))]
    count = data.draw(st.sampled_from([count, count - 1, count + 1, 0]))
    try:
        want = oracle(bytes(payload), count, base)
    except ValueError:
        with pytest.raises(ValueError):
            c_walk(bytes(payload), count, base)
    else:
        assert c_walk(bytes(payload), count, base) == want


# --- validate_produce_batch on what hostile clients sent --------------------------------------

def _recrc(batch: bytes | bytearray) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[R.CRC_START:])))
    return bytes(b)


def _with_header(batch: bytes, **fields: int) -> bytes:
    h = R.parse_header(batch)._replace(**fields)
    b = bytearray(batch)
    R._HEADER.pack_into(b, 0, *h)
    return _recrc(b)


def _batch_with_payload(payload: bytes, *, count: int, codec: int) -> bytes:
    return R._assemble(payload, base_offset=0, attributes=codec, last_offset_delta=count - 1, base_timestamp=1,
                       max_timestamp=1, producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=count)


def test_count_claims_two_records_but_batch_holds_one() -> None:
    one = R.build_batch([(b"k", b"v", [])], timestamp_ms=1)
    lying = _with_header(one, records_count=2, last_offset_delta=1)
    with pytest.raises(InvalidRecord, match="ends before it"):
        R.validate_produce_batch(lying, 1 << 20)


def test_garbage_record_body() -> None:
    good = R.build_batch([(b"key", b"value", [])], timestamp_ms=1)
    body = bytearray(good[R.BATCH_HEADER_SIZE:])
    body[1:] = b"\xff" * (len(body) - 1)
    with pytest.raises(InvalidRecord):
        R.validate_produce_batch(_recrc(good[: R.BATCH_HEADER_SIZE] + bytes(body)), 1 << 20)


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD])
def test_garbage_compressed_payload(codec: int) -> None:
    with pytest.raises(CorruptMessage, match="does not decompress"):
        R.validate_produce_batch(_batch_with_payload(b"\x01garbage, not compressed" * 3, count=1, codec=codec), 1 << 20)


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD])
def test_every_codec_with_valid_records_passes(codec: int) -> None:
    batch = R.build_batch([(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(50)], timestamp_ms=1, compression=codec)
    h = R.validate_produce_batch(batch, 1 << 20)
    assert h.records_count == 50


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD])
def test_compressed_payload_with_records_that_do_not_match_the_count(codec: int) -> None:
    records_bytes = R.build_batch([(b"k", b"v", [])], timestamp_ms=1)[R.BATCH_HEADER_SIZE:]
    payload = R._compress(codec, records_bytes)
    with pytest.raises(InvalidRecord):
        R.validate_produce_batch(_batch_with_payload(payload, count=3, codec=codec), 1 << 20)


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD])
def test_decompression_bomb_is_refused_within_the_bound(codec: int) -> None:
    """Tens of KB that expand to 200 MB: refused after at most the bound, quickly, in bounded memory."""
    import time
    import tracemalloc

    zeros = b"\0" * (200 * 1024 * 1024)
    payload = R._compress(codec, zeros) if codec != R.COMPRESSION_SNAPPY else bytes(cramjam.snappy.compress_raw(zeros))
    del zeros
    batch = _batch_with_payload(payload, count=1, codec=codec)
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(MessageTooLarge, match="expands beyond"):
            R.validate_produce_batch(batch, 1 << 30, max_uncompressed=8 * 1024 * 1024)
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5
    assert peak < 3 * 8 * 1024 * 1024  # the bound, not the 200 MB the bomb expands to


def test_iter_records_of_a_bomb_is_a_corrupt_message_not_a_gigabyte() -> None:
    payload = R._compress(R.COMPRESSION_ZSTD, b"\0" * (100 * 1024 * 1024))
    batch = _batch_with_payload(payload, count=1, codec=R.COMPRESSION_ZSTD)
    with pytest.raises(CorruptMessage, match="expands beyond"):
        list(R.iter_records(batch, max_uncompressed=4 * 1024 * 1024))
