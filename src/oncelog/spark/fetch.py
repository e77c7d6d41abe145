"""Executor side of the source: read one offset range of one partition into Arrow batches.

Theory of operation. A range ``[start, end)`` of a topic-partition is planned on the driver
from offsets the broker reported (under read_committed: the last stable offset), so every
offset in it exists — but not every offset carries a record the consumer will deliver:
transaction markers (control records) and, under read_committed, aborted records occupy
offsets and are never returned. A reader that waits for "the record at end - 1" hangs when
that offset is a marker (Spark's own source did: SPARK-25005). This reader stops at the first
of:

1. a delivered record at offset ``end - 1`` or beyond (records at ``>= end`` are not emitted);
2. an end-of-partition event (``enable.partition.eof``) at an offset ``>= end`` — librdkafka
   raises it when its fetch position reaches the high watermark, or the LSO under
   read_committed, and that position is past every marker and aborted batch it skipped;
3. the consumer's position (which librdkafka advances past control records too) ``>= end``
   while nothing more arrives.

Otherwise it keeps polling until ``kafkaConsumer.pollTimeoutMs`` passes without progress and
raises ``RangeReadError``: it never hangs. Data loss (the range starts below the partition's
earliest offset, e.g. after retention) raises when ``failOnDataLoss`` is true and is logged
otherwise.

Consumers are cached per worker process (Spark reuses Python workers), one per distinct client
configuration, and used with ``assign`` only — never a group subscription — so no rebalance can
move a partition away mid-range. A consumer that failed is closed and dropped from the cache.

Every consumer call runs through the consumer's ``Guarded`` (guard.py) with ``pollTimeoutMs`` as
its deadline — the bound the reader already promises for a range that makes no progress — so a
client call that hangs fails the task (``ClientCallTimeout``) instead of stalling it; the
consumer is then abandoned and closed on its guard's thread.

Per-record Python work is limited to reading the message's fields into lists; the Arrow
arrays are built per batch.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
from collections import OrderedDict
from typing import Any, Iterator

from oncelog.spark import handoff
from oncelog.spark.clientstate import ClientEvents, connection_conf, probe_cluster
from oncelog.spark.guard import Guarded, deadline_after
from oncelog.spark.options import SourceOptions

log = logging.getLogger(__name__)

#: Records per Arrow batch handed to Spark (Spark's own default for Arrow batches is 10,000).
ROWS_PER_BATCH = 16384
#: Upper bound of records taken from the client in one call.
CONSUME_BATCH = 4096
#: How long one blocking poll waits when nothing is queued.
IDLE_POLL_S = 0.1
#: Consumers kept per worker process.
MAX_CACHED_CONSUMERS = 4
#: How long the data-loss check waits for the partition's earliest offset.
WATERMARK_TIMEOUT_S = 10.0

_consumers: "OrderedDict[tuple[tuple[str, str], ...], Guarded[Any]]" = OrderedDict()


def _consumer(conf: dict[str, str]) -> Guarded[Any]:
    key = tuple(sorted(conf.items()))
    c = _consumers.get(key)
    if c is not None:
        _consumers.move_to_end(key)
        return c
    from confluent_kafka import Consumer

    events = ClientEvents()
    c = Guarded("range consumer", Consumer({**conf, "error_cb": events.on_error}), close=lambda k: k.close(),
                state=lambda: f"{events.describe()}; {probe_cluster(connection_conf(conf))}")
    _consumers[key] = c
    while len(_consumers) > MAX_CACHED_CONSUMERS:
        _, old = _consumers.popitem(last=False)
        old.retire()
    return c


def _drop_consumer(conf: dict[str, str]) -> None:
    c = _consumers.pop(tuple(sorted(conf.items())), None)
    if c is not None:
        c.retire()


@functools.cache
def arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema Spark expects for the source's rows (exactly; Spark compares it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from oncelog.spark.schema import source_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


class _BatchBuilder:
    """Column lists for one Arrow batch; ``flush`` turns them into a ``pyarrow.RecordBatch``.

    ``extend`` takes a run of data messages of the range's partition, in offset order, with
    their offsets already extracted; each field is read with one list comprehension per run
    (a C-level loop per field), not with Python statements per message."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[tuple[int, int]] = []
        self.headers: list[Any] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, msgs: list[Any], offsets: list[int]) -> None:
        self.keys += [m.key() for m in msgs]
        self.values += [m.value() for m in msgs]
        self.offsets += offsets
        self.stamps += [m.timestamp() for m in msgs]
        if self.include_headers:
            self.headers += [m.headers() for m in msgs]

    def flush(self) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.offsets)
        # librdkafka's timestamp types: 0 not available, 1 CreateTime, 2 LogAppendTime;
        # Spark's (Kafka's ids): -1, 0, 1.
        types = [k for k, _ in self.stamps]
        ts = pa.array([t for _, t in self.stamps], type=pa.int64())
        ts_types = pa.array(types, type=pa.int32())
        if 0 in types:
            ts = pc.if_else(pc.equal(ts_types, 0), pa.scalar(None, pa.int64()), ts)
        ts = ts.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        arrays = [
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, type=pa.int64()),
            ts,
            pc.subtract(ts_types, pa.scalar(1, pa.int32())),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, type=self.schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch


def read_range(options: SourceOptions, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch``es with exactly the deliverable records of
    ``[start, end)`` of ``topic``/``partition`` under the options' isolation level.

    Raises ``DataLossError`` (failOnDataLoss) or ``RangeReadError``; never blocks longer than
    ``pollTimeoutMs`` without progress."""
    if end <= start:
        handoff.record(topic, partition, end)
        return
    conf = options.consumer_config()
    t0 = time.monotonic()
    try:
        yield from _read(_consumer(conf), options, topic, partition, start, end)
    except BaseException:
        # A consumer in an unknown state (mid-fetch, errored) is not reused.
        _drop_consumer(conf)
        raise
    log.debug("oncelog source: read %s-%d [%d, %d) in %.0f ms", topic, partition, start, end, 1000 * (time.monotonic() - t0))
    # The whole range was delivered: an exactly-once sink in this same task may commit it.
    handoff.record(topic, partition, end)


def _read(consumer: Guarded[Any], options: SourceOptions, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    from confluent_kafka import KafkaError, TopicPartition

    timeout_s = options.poll_timeout_ms / 1000
    where = f"of {topic}-{partition} [{start}, {end})"
    tp = TopicPartition(topic, partition, start)
    consumer.call(f"assign {where}", lambda c: c.assign([tp]), timeout_s)
    builder = _BatchBuilder(topic, partition, options.include_headers)
    last_progress = time.monotonic()
    next_offset = start  # the lowest offset not yet accounted for
    first = True
    done = False
    try:
        while not done:
            msgs = consumer.call(f"consume {where}", lambda c: c.consume(num_messages=CONSUME_BATCH, timeout=0), timeout_s)
            if not msgs:
                m = consumer.call(f"poll {where}", lambda c: c.poll(IDLE_POLL_S), max(timeout_s, deadline_after(IDLE_POLL_S)))
                msgs = [m] if m is not None else []
            # Error events (end of partition, ...) split the messages into runs of data messages.
            # (Never compare a KafkaError with ==: its comparison with None leaves a TypeError
            # pending in the interpreter.)
            errors = [m.error() for m in msgs]
            cuts = [k for k, e in enumerate(errors) if e is not None] + [len(msgs)]
            i = 0
            for cut in cuts:
                if cut > i:  # a run of data messages
                    taken, done = _take(builder, msgs[i:cut], topic, partition, next_offset, end)
                    if taken:
                        if first and taken[0] > start:
                            _check_gap_at_start(options, consumer, topic, partition, start, taken[0])
                        first = False
                        next_offset = taken[-1] + 1
                        done = done or next_offset >= end
                    while len(builder) >= ROWS_PER_BATCH:
                        yield builder.flush()
                if done or cut == len(msgs):
                    break
                m, err = msgs[cut], errors[cut]
                i = cut + 1
                if err.code() == KafkaError._PARTITION_EOF:
                    if m.topic() == topic and m.partition() == partition and m.offset() >= end:
                        done = True
                        break
                elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    _data_loss(options, consumer, topic, partition, start, f"offset {start} is out of range: {err}")
                elif err.retriable() or err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                    log.warning("oncelog source %s-%d: transient consumer error: %s", topic, partition, err)
                else:
                    raise RangeReadError(f"{topic}-{partition} [{start}, {end}): consumer error {err}")
            if msgs:
                last_progress = time.monotonic()
            if done or msgs:
                continue
            # Nothing arrived: has the position moved past the range's trailing gap?
            pos = consumer.call(f"position {where}", lambda c: c.position([TopicPartition(topic, partition)]), timeout_s)[0].offset
            if pos >= end:
                break
            if time.monotonic() - last_progress > timeout_s:
                raise RangeReadError(
                    f"{topic}-{partition} [{start}, {end}): no progress for {timeout_s:.0f}s at position "
                    f"{pos}, last record before offset {next_offset} (kafkaConsumer.pollTimeoutMs)"
                )
        if len(builder):
            yield builder.flush()
    finally:
        if not consumer.abandoned:
            consumer.call(f"unassign {where}", lambda c: c.unassign(), timeout_s)


def _take(builder: _BatchBuilder, run: list[Any], topic: str, partition: int, next_offset: int, end: int) -> tuple[list[int], bool]:
    """Add the messages of ``run`` (data messages, no errors) with offsets in
    ``[next_offset, end)`` to ``builder``; returns their offsets and whether an offset ``>= end``
    was seen (the range is complete). One consumer is assigned one partition, and librdkafka
    delivers a partition's messages in offset order, so the run is sorted and the bounds are
    found by bisection; messages of another partition (never expected) are filtered out."""
    if run[0].partition() != partition or run[-1].partition() != partition or run[0].topic() != topic:
        run = [m for m in run if m.partition() == partition and m.topic() == topic]
        if not run:
            return [], False
    offsets = [m.offset() for m in run]
    lo = bisect.bisect_left(offsets, next_offset) if offsets[0] < next_offset else 0
    hi = bisect.bisect_left(offsets, end) if offsets[-1] >= end else len(offsets)
    complete = hi < len(offsets)
    if lo or complete:
        run, offsets = run[lo:hi], offsets[lo:hi]
    if run:
        builder.extend(run, offsets)
    return offsets, complete


def _check_gap_at_start(options: SourceOptions, consumer: Guarded[Any], topic: str, partition: int, start: int, first: int) -> None:
    """The first delivered offset is above ``start``: a transactional gap (markers, aborted
    data) is normal; offsets deleted by retention are data loss."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    low, _high = consumer.call(
        "get_watermark_offsets", lambda c: c.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S, cached=False),
        deadline_after(WATERMARK_TIMEOUT_S))
    if low > start:
        _data_loss(
            options, consumer, topic, partition, start,
            f"offsets [{start}, {min(low, first)}) were deleted before they were read (earliest is now {low})",
        )


def _data_loss(options: SourceOptions, consumer: Any, topic: str, partition: int, start: int, why: str) -> None:
    msg = f"{topic}-{partition}: {why}"
    if options.fail_on_data_loss:
        raise DataLossError(msg + " (set failOnDataLoss=false to go on)")
    log.warning("oncelog source: data loss: %s; going on (failOnDataLoss=false)", msg)
