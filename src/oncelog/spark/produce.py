"""Turn Arrow batches of sink rows into ``Producer.produce`` calls.

Columns (see ``schema``): ``value`` required; ``key``, ``topic``, ``partition``, ``headers``
optional; the ``topic`` option overrides a ``topic`` column. String columns are sent as their
UTF-8 bytes. Arrow columns are converted to Python lists once per batch; the per-row work is the
``produce`` call itself.

``produce_batches`` returns the number of records handed to the producer and the topic-partitions
it knows were written to (a record with no explicit partition is placed by the client's
partitioner, so the written partition is only known from delivery reports; callers that need a
partition — the exactly-once marker — use ``first_topic``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

#: How long ``produce`` may wait for room in a full client queue before the task fails.
QUEUE_FULL_TIMEOUT_S = 120.0
#: Serve delivery callbacks every this many records.
POLL_EVERY = 10_000


class SinkWriteError(RuntimeError):
    """Records could not be handed to or delivered by the producer."""


@dataclass
class Produced:
    records: int = 0
    first_topic: str | None = None


def _column(batch: Any, name: str) -> list[Any] | None:
    import pyarrow as pa

    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return None
    col = batch.column(idx)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        if name in ("key", "value"):
            col = col.cast(pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col.to_pylist()


def produce_batches(producer: Any, batches: Iterable[Any], topic_option: str | None) -> Produced:
    """Produce every row of ``batches``; raises SinkWriteError if a topic is missing or the
    client queue stays full. Delivery errors surface later (flush / commit_transaction)."""
    out = Produced()
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _column(batch, "value")
        if values is None:
            raise SinkWriteError("oncelog sink: no 'value' column")
        keys = _column(batch, "key") or [None] * n
        topics = [topic_option] * n if topic_option else _column(batch, "topic")
        if topics is None:
            raise SinkWriteError("oncelog sink: set the 'topic' option or provide a 'topic' column")
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        if out.first_topic is None:
            out.first_topic = topics[0]
        produce = producer.produce
        if partitions is None and headers is None and topic_option:
            # The common case: one call per row and nothing else. The client's event queue is
            # not polled here: the writers ask for delivery reports of failures only, so it
            # stays empty, and flush()/commit_transaction() serve it at the end (a poll(0) per
            # 10,000 rows cost ~7% of the writer's time in the profile, docs/PERFORMANCE.md).
            for value, key in zip(values, keys):
                try:
                    produce(topic_option, value, key)
                except BufferError:
                    _wait_for_room(producer, lambda: produce(topic_option, value, key))
        else:
            for i in range(n):
                t = topics[i]
                if t is None:
                    raise SinkWriteError("oncelog sink: a row has a null topic and no 'topic' option is set")
                kw: dict[str, Any] = {"value": values[i], "key": keys[i]}
                if partitions is not None and partitions[i] is not None:
                    kw["partition"] = partitions[i]
                if headers is not None and headers[i]:
                    kw["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                try:
                    produce(t, **kw)
                except BufferError:
                    _wait_for_room(producer, lambda: produce(t, **kw))
                if i % POLL_EVERY == 0:
                    producer.poll(0)
        out.records += n
    return out


def _wait_for_room(producer: Any, retry: Any) -> None:
    deadline = time.monotonic() + QUEUE_FULL_TIMEOUT_S
    while True:
        producer.poll(0.005)
        try:
            retry()
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise SinkWriteError(f"producer queue stayed full for {QUEUE_FULL_TIMEOUT_S:.0f}s") from None
