"""The sink's writers: streaming (micro-batch) and batch, exactly-once or at-least-once.

``delivery.guarantee=exactly_once`` (the default): every task runs the transactional protocol
of ``exactly_once`` in its executor. Streaming tasks are identified by Spark's query id (stable
across restarts), micro-batch id and task partition id; batch writes need a ``writeId`` option
(a name for the logical write: re-running a batch job with the same writeId writes nothing
that was already committed) and are refused without one (``SinkOptions.check_batch_write``).

``delivery.guarantee=at_least_once`` (opt-in; what Spark's own Kafka sink does): every task
produces its rows with an idempotent producer (no duplicates from retried *requests*) and
flushes; ``commit``/``abort`` do nothing. A task or batch that is re-executed writes its rows
again: duplicates are possible, losses are not.

The writer objects are created on the driver, pickled to executors (``write``) and re-created
in another driver process for ``commit``/``abort``; they hold only options, never clients.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from oncelog.spark import exactly_once, faults, handoff
from oncelog.spark.clientstate import ClientEvents, connection_conf, probe_cluster
from oncelog.spark.guard import Guarded, deadline_after
from oncelog.spark.options import EXACTLY_ONCE, SinkOptions
from oncelog.spark.produce import SinkWriteError, produce_batches
from oncelog.spark.schema import check_sink_schema
from oncelog.spark.txn_producer import close_producer

log = logging.getLogger(__name__)

#: At-least-once producers kept per worker process (one per distinct configuration).
MAX_CACHED_PRODUCERS = 4
_producers: dict[tuple[tuple[str, str], ...], "_AloProducer"] = {}


@dataclass
class AloCommitMessage(WriterCommitMessage):
    """What one at-least-once task wrote."""

    partition_id: int
    records: int


class _AloProducer:
    """An idempotent producer cached per worker process, collecting delivery failures; its
    ``flush`` is bounded (guard.py)."""

    def __init__(self, conf: dict[str, str]) -> None:
        from confluent_kafka import Producer

        self.errors: list[Any] = []
        self.events = ClientEvents()
        producer = Producer({
            **conf, "delivery.report.only.error": True, "on_delivery": self._on_delivery,
            "error_cb": self.events.on_error,
        })
        self.client: Guarded[Any] = Guarded(
            "at-least-once producer", producer, close=close_producer,
            state=lambda: f"{self.events.describe()}; {probe_cluster(connection_conf(conf))}")

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)


def write_at_least_once(batches: Iterator[Any], options: SinkOptions, partition_id: int) -> AloCommitMessage:
    """Produce and flush every row; raises SinkWriteError if any record was not delivered
    within ``flushTimeoutMs``, ClientCallTimeout if the flush itself did not return."""
    conf = options.producer_config()
    key = tuple(sorted(conf.items()))
    p = _producers.get(key)
    if p is None:
        while len(_producers) >= MAX_CACHED_PRODUCERS:
            _producers.pop(next(iter(_producers))).client.retire()
        p = _producers[key] = _AloProducer(conf)
    p.errors.clear()
    try:
        produced = produce_batches(p.client.raw, batches, options.topic)
        timeout_s = options.flush_timeout_ms / 1000
        left = p.client.call("flush", lambda c: c.flush(timeout_s), deadline_after(timeout_s))
        if left:
            raise SinkWriteError(f"{left} records not delivered within flushTimeoutMs={options.flush_timeout_ms}")
        if p.errors:
            raise SinkWriteError(f"{len(p.errors)} records failed delivery; first error: {p.errors[0]}")
    except BaseException:
        # A producer with undelivered records (or a wedged one) is not reused.
        dropped = _producers.pop(key, None)
        if dropped is not None:
            dropped.client.retire()
        raise
    return AloCommitMessage(partition_id, produced.records)


def _task() -> Any:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("oncelog sink: write() must run inside a Spark task")
    return tc


class _Writing:
    options: SinkOptions

    def _summarise(self, messages: List[Optional[WriterCommitMessage]], what: str) -> None:
        done = [m for m in messages if m is not None]
        records = sum(getattr(m, "records", 0) for m in done)
        skipped = sum(1 for m in done if getattr(m, "skipped", False))
        log.info("oncelog sink %s: %d tasks, %d records, %d re-executions skipped", what, len(done), records, skipped)


class OncelogStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """Micro-batch writer. ``commit`` and ``abort`` have no effect on the data (see module)."""

    def __init__(self, options: SinkOptions, schema: Any) -> None:
        check_sink_schema(schema, topic_option=options.topic)
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        tc = _task()
        if self.options.guarantee != EXACTLY_ONCE:
            return write_at_least_once(iterator, self.options, tc.partitionId())
        query = tc.getLocalProperty("sql.streaming.queryId")
        batch = tc.getLocalProperty("streaming.sql.batchId")
        if not query or batch is None:
            raise RuntimeError("oncelog sink: no streaming query id / batch id in the task context")
        ident = exactly_once.TaskIdent(query, int(batch), tc.partitionId())
        return exactly_once.write_task(iterator, ident, self.options, collect_inputs=handoff.collect)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        # Every task committed its own transaction; a repeated call for the same batch (after a
        # driver failure) is as harmless as the first.
        faults.maybe_fire("driver_commit", batchId)
        self._summarise(messages, f"batch {batchId} committed")

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        # Nothing to undo: committed tasks stay committed and will be skipped when the batch is
        # re-executed; open transactions are aborted by the next attempt's init_transactions.
        self._summarise(messages, f"batch {batchId} aborted")


class OncelogBatchWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("oncelog")``. Exactly-once (the default) needs ``writeId`` (see module)."""

    def __init__(self, options: SinkOptions, schema: Any) -> None:
        check_sink_schema(schema, topic_option=options.topic)
        self.options = options.check_batch_write()

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        tc = _task()
        if self.options.guarantee != EXACTLY_ONCE:
            return write_at_least_once(iterator, self.options, tc.partitionId())
        assert self.options.write_id is not None
        ident = exactly_once.TaskIdent(self.options.write_id, 0, tc.partitionId())
        return exactly_once.write_task(iterator, ident, self.options)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._summarise(messages, "write committed")

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._summarise(messages, "write aborted")
