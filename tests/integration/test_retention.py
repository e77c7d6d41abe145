"""Retention and the log start offset, through real clients (R4).

A topic with small segments and ``retention.bytes`` / ``retention.ms`` on a broker that checks
retention every 200 ms: old segments are deleted (never the active one), the log start offset
moves (ListOffsets earliest), a fetch below it gets OFFSET_OUT_OF_RANGE, and consumers reset as
their ``auto.offset.reset`` says (earliest: to the new start; latest: to the end), with
confluent-kafka and kafka-python. DeleteRecords moves the start too. Consumers reading while
retention deletes segments under them get intact data (fetch file slices stay valid: storage
keeps deleted segments open for file.delete.delay.ms).
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from pathlib import Path

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

CHECK = {"log.retention.check.interval.ms": "200"}
SEGMENT_BYTES = 20_000
VALUE = 200  # bytes per record value: a 100-record batch is ~21 KB, one batch per segment


def _value(i: int) -> bytes:
    return f"v{i:08d}".encode().ljust(VALUE, b".")


def _produce_rounds(b: BrokerProcess, topic: str, start: int, rounds: int, per_round: int = 50,
                    timestamp_ms: int | None = None) -> int:
    """``rounds`` flushes of ``per_round`` records (values ``_value(start...)``) to partition 0,
    so each round is at least one batch. Returns the next value index."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 1})
    errors: list[str] = []
    i = start
    for _ in range(rounds):
        for _ in range(per_round):
            kw = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
            p.produce(topic, _value(i), partition=0, on_delivery=lambda e, m: e and errors.append(str(e)), **kw)
            i += 1
        assert p.flush(30) == 0
    assert not errors, errors[:3]
    return i


def _watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncelog-test-watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def _segment_bases(b: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in (b.data_dir / f"{topic}-0").glob("*.log"))


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def _raw_fetch_error(bootstrap: str, topic: str, offset: int) -> tuple[int, int]:
    """(error code, log start offset) of a Fetch at ``offset`` on partition 0."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.FETCH, 11)
        req = m["FetchRequest"](
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=(m["FetchTopic"](topic=topic, partitions=(m["FetchPartition"](
                partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
        )
        res = c.request(apis.FETCH, req, version=11)
        part = res.responses[0].partitions[0]
        if part.error_code:
            # Kafka sends an empty record set with an error, never a null one: librdkafka
            # cannot parse a null one and would never see the error.
            assert part.records == b"", f"records {part.records!r} with error {part.error_code}"
        return part.error_code, part.log_start_offset


# -- consumers resetting -----------------------------------------------------------------------


def _consume_from(client: str, bootstrap: str, topic: str, offset: int | None, reset: str, *, expected: int,
                  before_new: int | None = None, produce_new=None, timeout: float = 60) -> list[tuple[int, bytes]]:  # type: ignore[no-untyped-def]
    """Assign partition 0 at ``offset`` (None: the beginning, looked up with ListOffsets) with
    ``auto.offset.reset=reset`` and read ``expected`` records. For 'latest': wait until the consumer's position reaches ``before_new`` (the reset
    happened), then call ``produce_new()``."""
    deadline = time.monotonic() + timeout
    out: list[tuple[int, bytes]] = []
    if client == "confluent":
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        # librdkafka reports no position until a record is consumed; its fetch debug log says
        # where it fetches from ("Fetch topic T [0] at offset 600 ..."): that is how we see the
        # reset has happened.
        fetch_offsets: list[int] = []
        pattern = re.compile(rf"Fetch topic {re.escape(topic)} \[0\] at offset (\d+)")

        class _FetchLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                found = pattern.search(record.getMessage())
                if found:
                    fetch_offsets.append(int(found.group(1)))

        logger = logging.getLogger(f"oncelog.test.rdkafka.{reset}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        handler = _FetchLog()
        logger.addHandler(handler)
        c = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"oncelog-test-reset-{reset}", "enable.auto.commit": False,
            "auto.offset.reset": reset, "enable.partition.eof": False, "check.crcs": True, "logger": logger,
            "debug": "fetch",
        })
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING if offset is None else offset)])

        def poll() -> None:
            for msg in c.consume(num_messages=1000, timeout=0.2):
                assert not msg.error(), f"consumer error: {msg.error()}"
                out.append((msg.offset(), msg.value()))

        def position() -> int:
            c.poll(0)  # serves the log queue
            return fetch_offsets[-1] if fetch_offsets else -1

    elif client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition as KTP

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                          auto_offset_reset=reset, check_crcs=True)
        ktp = KTP(topic, 0)
        c.assign([ktp])
        if offset is None:
            c.seek_to_beginning(ktp)
        else:
            c.seek(ktp, offset)

        def poll() -> None:
            for msgs in c.poll(timeout_ms=200).values():
                out.extend((msg.offset, msg.value) for msg in msgs)

        def position() -> int:
            return c.position(ktp)
    else:
        raise ValueError(client)
    try:
        if produce_new is not None:
            while position() != before_new:
                assert time.monotonic() < deadline, f"{client} never reset to {before_new} (at {position()})"
                poll()
                assert not out, f"{client} read {out[:1]} before any new record was produced"
            produce_new()
        while len(out) < expected and time.monotonic() < deadline:
            poll()
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            poll()
    finally:
        c.close()
        if client == "confluent":
            logger.removeHandler(handler)
    return out


@pytest.fixture
def retained(broker_factory):  # type: ignore[no-untyped-def]
    """A broker and a topic whose oldest segments retention.bytes has deleted: (broker, topic,
    log start, log end)."""
    b: BrokerProcess = broker_factory(overrides=CHECK)
    topic = "retained"
    create_topic("confluent", b.bootstrap, topic, 1,
                 {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(3 * SEGMENT_BYTES)})
    end = _produce_rounds(b, topic, 0, 12)

    def settled() -> bool:
        # Retention deletes the oldest segment only while what remains holds retention.bytes;
        # once that is no longer so and the log start is the first segment's base, it is done.
        sizes = [p.stat().st_size for p in sorted((b.data_dir / f"{topic}-0").glob("*.log"))]
        low = _watermarks(b.bootstrap, topic)[0]
        return low > 0 and low == _segment_bases(b, topic)[0] and sum(sizes[1:]) < 3 * SEGMENT_BYTES

    _wait(settled, 10, "retention to delete the oldest segments")
    return b, topic, _watermarks(b.bootstrap, topic)[0], end


def test_retention_bytes_deletes_oldest_segments(retained) -> None:  # type: ignore[no-untyped-def]
    """R4: whole old segments go, the active one stays; earliest offset = first segment's base."""
    b, topic, low, end = retained
    low, high = _watermarks(b.bootstrap, topic)
    bases = _segment_bases(b, topic)
    assert high == end
    assert low == bases[0] > 0
    size = sum(p.stat().st_size for p in (b.data_dir / f"{topic}-0").glob("*.log"))
    # Retention deletes a segment only if what remains still holds retention.bytes.
    assert size <= 3 * SEGMENT_BYTES + SEGMENT_BYTES, f"{size} bytes remain"
    assert len(bases) >= 2
    assert _raw_fetch_error(b.bootstrap, topic, low - 1) == (ErrorCode.offset_out_of_range, low)
    assert _raw_fetch_error(b.bootstrap, topic, low)[0] == ErrorCode.none


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consumer_below_log_start_resets_to_earliest(retained, client: str) -> None:
    """R4: fetching offset 0 after retention gives OFFSET_OUT_OF_RANGE; auto.offset.reset=earliest
    resumes at the new log start and reads everything from there, intact and in order."""
    b, topic, low, end = retained
    got = _consume_from(client, b.bootstrap, topic, 0, "earliest", expected=end - low)
    assert [o for o, _ in got] == list(range(low, end))
    assert all(v == _value(o) for o, v in got)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consumer_below_log_start_resets_to_latest(retained, client: str) -> None:
    """R4: with auto.offset.reset=latest the consumer jumps to the log end and sees only records
    produced after that."""
    b, topic, _low, end = retained
    new: list[int] = []

    def produce_new() -> None:
        new.append(_produce_rounds(b, topic, end, 1, per_round=20))

    got = _consume_from(client, b.bootstrap, topic, 0, "latest", expected=20, before_new=end, produce_new=produce_new)
    assert new == [end + 20]
    assert [o for o, _ in got] == list(range(end, end + 20))
    assert all(v == _value(o) for o, v in got)


def test_retention_ms_deletes_segments_older_than_it(broker_factory) -> None:
    """R4: segments whose newest record is older than retention.ms go; newer ones stay."""
    b: BrokerProcess = broker_factory(overrides=CHECK)
    topic = "retention-ms"
    create_topic("confluent", b.bootstrap, topic, 1,
                 {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": str(10 * 60_000)})
    hour_ago = int(time.time() * 1000) - 3600_000
    old_end = _produce_rounds(b, topic, 0, 6, timestamp_ms=hour_ago)
    end = _produce_rounds(b, topic, old_end, 4)
    _wait(lambda: _watermarks(b.bootstrap, topic)[0] > 0, 10, "retention.ms to delete old segments")
    time.sleep(0.5)  # a few more retention checks: nothing newer may go
    low, high = _watermarks(b.bootstrap, topic)
    assert high == end
    bases = _segment_bases(b, topic)
    assert low == bases[0]
    # Every segment holding only old records is gone, and no segment with a new record.
    assert old_end - 2 * 50 < low <= old_end, f"log start {low}, old records end at {old_end}"
    got = _consume_from("confluent", b.bootstrap, topic, 0, "earliest", expected=end - low)
    assert [o for o, _ in got] == list(range(low, end))


def test_delete_records_moves_log_start(broker_factory) -> None:
    """R4: AdminClient.delete_records advances the log start; segments wholly below it go; a
    fetch below it is OFFSET_OUT_OF_RANGE; the new start survives a restart."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b: BrokerProcess = broker_factory()
    topic = "delete-records"
    create_topic("confluent", b.bootstrap, topic, 1, {"segment.bytes": str(SEGMENT_BYTES)})
    end = _produce_rounds(b, topic, 0, 8)
    segments_before = _segment_bases(b, topic)
    cut = 275  # inside a segment, not on a batch boundary
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin.delete_records([TopicPartition(topic, 0, cut)], operation_timeout=10)
    deleted = list(res.values())[0].result(timeout=30)
    assert deleted.low_watermark == cut
    assert _watermarks(b.bootstrap, topic) == (cut, end)
    assert _raw_fetch_error(b.bootstrap, topic, cut - 1) == (ErrorCode.offset_out_of_range, cut)
    bases = _segment_bases(b, topic)
    assert bases[0] <= cut and len(bases) < len(segments_before)
    got = _consume_from("kafka-python", b.bootstrap, topic, 0, "earliest", expected=end - cut)
    # Whole batches are served, so records below the start may come in the first batch; clients
    # skip them (Kafka does the same). What the consumer hands out starts at the log start.
    assert [o for o, _ in got] == list(range(cut, end))
    # Deleting below the start is a no-op; above the end is OFFSET_OUT_OF_RANGE.
    res = admin.delete_records([TopicPartition(topic, 0, 10)], operation_timeout=10)
    assert list(res.values())[0].result(timeout=30).low_watermark == cut
    res = admin.delete_records([TopicPartition(topic, 0, end + 5)], operation_timeout=10)
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        list(res.values())[0].result(timeout=30)
    b.kill()
    b.start()
    assert _watermarks(b.bootstrap, topic) == (cut, end)


def test_consumers_read_intact_data_while_retention_deletes_segments(broker_factory) -> None:
    """Fetch file slices (sent with sendfile or copied) stay valid while retention deletes the
    segments they point into: a producer keeps appending, retention keeps deleting, and
    consumers reading from the log start read only whole, CRC-checked records whose content
    matches their offset, without gaps.

    (A consumer *below* a log start that keeps moving cannot win with librdkafka: it resets to
    the start it was told and backs off 500 ms before fetching there, by which time retention
    has moved on. So the consumers here start at the beginning, found with ListOffsets.)"""
    b: BrokerProcess = broker_factory(overrides=CHECK)
    topic = "churn"
    create_topic("confluent", b.bootstrap, topic, 1,
                 {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(20 * SEGMENT_BYTES)})
    stop = threading.Event()
    produced = [0]
    failure: list[BaseException] = []

    def producer() -> None:
        # A few hundred records/s; retention keeps ~1900 records, several seconds' worth.
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 1})
        i = 0
        deadline = time.monotonic() + 90
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                for _ in range(50):
                    p.produce(topic, _value(i), partition=0)
                    i += 1
                assert p.flush(30) == 0
                produced[0] = i
                time.sleep(0.1)
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    t = threading.Thread(target=producer)
    t.start()
    try:
        _wait(lambda: produced[0] >= 1500 or failure, 30, "the producer")
        results = [(client, _consume_from(client, b.bootstrap, topic, None, "earliest", expected=1500, timeout=30))
                   for client in ("confluent", "kafka-python")]
    finally:
        stop.set()
        t.join(30)
    assert not failure, failure
    low, _high = _watermarks(b.bootstrap, topic)
    assert low > 0, "retention never ran"
    for client, got in results:
        assert len(got) >= 1500, f"{client} read {len(got)} records"
        offsets = [o for o, _ in got]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"{client}: gap or repeat"
        bad = [(o, v[:12]) for o, v in got if v != _value(o)]
        assert not bad, f"{client}: records with wrong content {bad[:3]}"
