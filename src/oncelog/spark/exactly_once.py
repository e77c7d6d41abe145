"""The exactly-once write protocol of one sink task (R24). See docs/SPARK.md for the argument.

Every write task of micro-batch ``b`` of query ``q`` with task partition ``p`` does, in its
executor:

1. obtain a transactional producer with ``transactional.id = <prefix>-<q>-<p>`` — stable across
   task attempts, executor losses and driver restarts, never derived from the attempt number.
   A new producer runs ``init_transactions()``: the coordinator bumps the epoch, which fences
   every earlier attempt of the same (q, p) (a zombie's next produce, AddPartitions or EndTxn
   fails with PRODUCER_FENCED), and finishes that attempt's transaction: completes it if its
   commit was already decided (PrepareCommit), aborts it otherwise. Nothing relies on Spark
   calling ``abort()``.
2. read the *marker* of (q, p): the committed offset of the consumer group named like the
   transactional id, with ``require_stable`` (pending transactional offsets are waited for).
   The marker holds ``last committed batch id + 1``. If it is ``> b``, batch ``b`` of this task
   partition is already committed — this is a re-execution — so the task writes nothing and
   returns ``skipped``.
3. otherwise ``begin_transaction()`` and add the marker ``b + 1`` to the transaction first
   (``send_offsets_to_transaction``, group = transactional id); then produce every row; then —
   when the task itself read ranges of the ``oncelog`` source (``handoff``) — add the input
   offsets (group ``inputOffsetsGroup``, default ``<prefix>-<q>``); then
   ``commit_transaction()``.

So each (q, b, p) is committed at most once, and exactly once once the query gets past batch b.

Producers are cached per worker process and reused for the task partition's next batches
(InitProducerId costs 50-500 ms). Reuse keeps the argument intact: a cached producer is either
still the newest epoch of its id — then every earlier transaction of the id is its own and
finished, and the marker is final — or it was fenced by a newer attempt; then a "committed"
marker is still final (commits are never undone), and a "not committed" one is checked by the
marker's AddOffsetsToTxn in step 3, which fails on a fenced producer *before any input is
consumed*, and the task starts over from step 1 with a new producer. A producer is dropped on
any failure.

The output of a task becomes visible to read_committed consumers when its transaction commits:
a batch's output appears task by task, never twice. Spark's driver-side ``commit(messages,
batchId)`` has nothing left to do; calling it again for the same batch (Spark does after a
driver failure) is harmless.

The marker offset is stored on partition 0 of the task's first output topic (or of its first
input topic when it wrote nothing): group offsets can only be committed for partitions that
exist. The marker's metadata names the query, batch and partition for people reading
``groups describe``. A task that neither read nor wrote anything opens no transaction.

No client call blocks a task without a deadline (issue 13): the producer's calls go through
``txn_producer`` (``requestTimeoutMs`` each, ``flushTimeoutMs`` for the commit) and the
group questions through ``groups``; a call past its deadline raises ``ClientCallTimeout``
(guard.py), the producer and the AdminClient are thrown away, and Spark runs the task again —
whose fresh producer's ``init_transactions`` fences the abandoned one.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NoReturn

from pyspark.sql.datasource import WriterCommitMessage

from oncelog.spark import faults, groups
from oncelog.spark.groups import group_metadata, last_committed_batch
from oncelog.spark.options import SinkOptions
from oncelog.spark.produce import produce_batches
from oncelog.spark.txn_producer import Producers, TxnProducer

log = logging.getLogger(__name__)


class ExactlyOnceError(RuntimeError):
    """The task's transaction could not be completed; the task fails and Spark re-runs it."""


@dataclass(frozen=True)
class TaskIdent:
    """Who is writing: the query (or batch ``writeId``), the micro-batch and the task partition."""

    query_id: str
    batch_id: int
    partition_id: int

    def transactional_id(self, prefix: str) -> str:
        return f"{prefix}-{self.query_id}-{self.partition_id}"

    def marker_metadata(self) -> str:
        return json.dumps({"query": self.query_id, "batch": self.batch_id, "partition": self.partition_id})


@dataclass
class EosCommitMessage(WriterCommitMessage):
    """What one exactly-once task did (sent to the driver's ``commit``)."""

    batch_id: int
    partition_id: int
    transactional_id: str
    records: int = 0
    skipped: bool = False
    input_offsets: dict[str, dict[str, int]] = field(default_factory=dict)


def input_offsets_group(options: SinkOptions, query_id: str) -> str:
    return options.input_offsets_group or f"{options.transactional_id_prefix}-{query_id}"


def _marker_topic(first: Any, options: SinkOptions) -> str | None:
    if options.topic:
        return options.topic
    idx = first.schema.get_field_index("topic")
    return None if idx < 0 else first.column(idx)[0].as_py()


_producers = Producers()


class _Begun:
    """The outcome of the preamble: the producer, and whether the batch was already committed."""

    def __init__(self, producer: TxnProducer, skipped: bool) -> None:
        self.producer = producer
        self.skipped = skipped


def _begin(options: SinkOptions, tid: str, ident: TaskIdent, marker: Any) -> _Begun:
    """Steps 1-3 up to the marker: a producer, the marker check, and — unless the batch is
    already committed — a transaction holding the marker ``b + 1``."""
    from confluent_kafka import KafkaException

    producer: TxnProducer | None = None
    try:
        producer, fresh = _producers.get(options, tid)
        while True:
            # With a fresh producer, init_transactions has fenced every earlier attempt and
            # finished its transaction, so the marker read here is final. With a cached one, a
            # "committed" answer is final too; "not committed" is confirmed by the first
            # transactional request below, which fails if another attempt fenced this producer.
            done = last_committed_batch(options, tid)
            if done is not None and done >= ident.batch_id:
                return _Begun(producer, True)
            try:
                producer.begin_transaction()
                producer.send_offsets_to_transaction(
                    f"marker of batch {ident.batch_id}", [marker], group_metadata(options, tid))
                return _Begun(producer, False)
            except KafkaException as exc:
                if fresh:
                    raise
                log.info("oncelog sink: cached producer of %s is stale (%s); initialising a new one", tid, exc.args[0])
                producer = None
                producer, fresh = _producers.fresh(options, tid), True
    except BaseException as exc:
        _failed(options, tid, exc, ident)


def _failed(options: SinkOptions, tid: str, exc: BaseException, ident: TaskIdent) -> NoReturn:
    """Throw the producer away — closing it aborts its open transaction if it still can; the
    next attempt's init_transactions or the transaction timeout does otherwise — and the
    AdminClient (either may be wedged), then raise: ExactlyOnceError for client errors,
    anything else (ClientCallTimeout included) as it is."""
    from confluent_kafka import KafkaException

    _producers.drop(options, tid)
    groups.drop_clients(options)
    if not isinstance(exc, KafkaException):
        raise exc
    err = exc.args[0] if exc.args else None
    raise ExactlyOnceError(f"{tid} batch {ident.batch_id}: transaction failed: {err}") from exc


def _marker(topic: str, partition: int, ident: TaskIdent) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, ident.batch_id + 1, metadata=ident.marker_metadata())


_background: ThreadPoolExecutor | None = None


def _in_background(fn: Callable[..., Any], *args: Any) -> "Future[Any]":
    """Run ``fn`` on this worker process's one helper thread (created on first use, after
    Spark forked the worker)."""
    global _background
    if _background is None:
        _background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-sink")
    return _background.submit(fn, *args)


def write_task(
    batches: Iterable[Any],
    ident: TaskIdent,
    options: SinkOptions,
    *,
    collect_inputs: Callable[[], dict[tuple[str, int], int]] = dict,
) -> EosCommitMessage:
    """Run the protocol above for one task. Raises on any failure, leaving an open transaction
    to be aborted by the next attempt's ``init_transactions`` (or the transaction timeout).

    With the ``topic`` option the marker's place (partition 0 of that topic) is known before
    any input arrives, so the preamble (producer, marker check, begin, marker) runs on a helper
    thread while the task's first rows are computed: InitProducerId and the marker's round
    trips overlap with reading the input instead of adding to it. The preamble consumes no
    input, so the protocol is unchanged. Without the option the marker goes where the first
    row is written, and the preamble waits for it."""
    from confluent_kafka import TopicPartition

    tid = ident.transactional_id(options.transactional_id_prefix)
    t0 = time.monotonic()
    rows = iter(batches)
    early = _in_background(_begin, options, tid, ident, _marker(options.topic, 0, ident)) if options.topic else None
    try:
        first = next((b for b in rows if b.num_rows > 0), None)
    except BaseException:
        if early is not None:
            try:
                early.result()
            except BaseException as exc:  # the input's failure is the one to report
                log.warning("oncelog sink: %s preamble also failed: %s", tid, exc)
            _producers.drop(options, tid)  # it may hold an open transaction
        raise
    t_input = time.monotonic()
    inputs: dict[tuple[str, int], int] | None = None
    if early is not None:
        begun = early.result()
    else:
        if first is None:
            inputs = collect_inputs()  # the input is exhausted: every range this task read is known
            if not inputs:
                # Nothing written, nothing read: no transaction needed, nothing to remember.
                return EosCommitMessage(ident.batch_id, ident.partition_id, tid)
            marker_topic, marker_partition = min(inputs)
        else:
            marker_topic, marker_partition = _marker_topic(first, options), 0
            if marker_topic is None:
                raise ExactlyOnceError("oncelog sink: a row has a null topic and no 'topic' option is set")
        begun = _begin(options, tid, ident, _marker(marker_topic, marker_partition, ident))
    t_begun = time.monotonic()
    producer = begun.producer
    if begun.skipped:
        for _ in rows:  # re-execution of a committed batch: consume the input, write nothing
            pass
        if inputs is None:
            collect_inputs()
        log.info("oncelog sink: %s batch %d already committed; writing nothing", tid, ident.batch_id)
        return EosCommitMessage(ident.batch_id, ident.partition_id, tid, skipped=True)

    try:
        produced = produce_batches(producer.raw, ([first] if first is not None else []), options.topic)
        more = produce_batches(producer.raw, rows, options.topic)
        faults.maybe_fire("after_produce", ident.batch_id)
        if inputs is None:
            inputs = collect_inputs()
        if inputs:
            tps = [TopicPartition(t, p, end) for (t, p), end in sorted(inputs.items())]
            group = input_offsets_group(options, ident.query_id)
            producer.send_offsets_to_transaction(
                f"input offsets of batch {ident.batch_id}", tps, group_metadata(options, group))
        t_produced = time.monotonic()
        faults.maybe_fire("before_commit", ident.batch_id, prepare=lambda: producer.raw.flush(30))
        producer.commit_transaction(
            f"batch {ident.batch_id}, {produced.records + more.records} records")
    except BaseException as exc:
        _failed(options, tid, exc, ident)
    faults.maybe_fire("after_commit", ident.batch_id)
    in_json: dict[str, dict[str, int]] = {}
    for (t, p), end in sorted(inputs.items()):
        in_json.setdefault(t, {})[str(p)] = end
    records = produced.records + more.records
    if log.isEnabledFor(logging.DEBUG):
        t_end = time.monotonic()
        log.debug(
            "oncelog sink: %s batch %d: %d records; first input %.0f ms, then preamble %.0f ms%s, "
            "produce %.0f ms, commit %.0f ms", tid, ident.batch_id, records, 1000 * (t_input - t0),
            1000 * (t_begun - t_input), " (overlapped)" if early is not None else "",
            1000 * (t_produced - t_begun), 1000 * (t_end - t_produced),
        )
    return EosCommitMessage(ident.batch_id, ident.partition_id, tid, records=records, input_offsets=in_json)
