"""The exactly-once sink (R24, R17): per-task transactions with stable transactional ids,
re-executed tasks write nothing twice, zombie attempts are fenced, input offsets commit in the
output transaction when the task read them. Output is always checked with read_committed.

Needs the transaction coordinator and transactional offset commits (TxnOffsetCommit /
require_stable OffsetFetch)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException

from oncelog.spark import exactly_once
from oncelog.spark.exactly_once import TaskIdent
from oncelog.spark.options import SinkOptions
from oncelog.spark.writer import OncelogStreamWriter
from sparkutil import (
    create_topics,
    group_offsets,
    items,
    latest_offsets,
    produce,
    produce_in_txn,
    read_all,
    run_available_now,
    run_expect_failure,
    stream,
    txn_producer,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _eos(bs: str, **extra: str) -> dict[str, str]:
    """The sink's options in these tests: exactly once is the default (issue 13), so not named."""
    return {"kafka.bootstrap.servers": bs, "topic": "out", **extra}


def _pipeline(spark, bs: str):
    df = stream(spark, bs, subscribe="in", startingOffsets="earliest", maxOffsetsPerTrigger="500")
    return df.selectExpr("key", "concat(value, cast('!' as binary)) as value")


def _query_id(ckpt) -> str:
    import json

    return json.loads((ckpt / "metadata").read_text())["id"]


def _setup(bs: str, n: int = 1500):
    create_topics(bs, {"in": 2, "out": 2})
    src = items(n, 2, "e")
    produce(bs, "in", src)
    return Counter(v + b"!" for _, _, v in src)


def test_pipeline_output_is_exact_and_input_offsets_commit_with_it(spark, broker, tmp_path) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"in": 2, "out": 2})
    # Input with aborted data in it: read_committed in, exactly-once out.
    src = items(1000, 2, "e")
    produce(bs, "in", src[:500])
    p = txn_producer(bs, "upstream")
    produce_in_txn(p, "in", items(100, 2, "junk"), end="abort")
    produce_in_txn(p, "in", src[500:], end="commit")
    want = Counter(v + b"!" for _, _, v in src)

    ckpt = tmp_path / "ckpt"
    q = run_available_now(_pipeline(spark, bs), str(ckpt), fmt="oncelog", **_eos(bs))
    assert sum(1 for pr in q.recentProgress if pr["numInputRows"] > 0) >= 2
    assert Counter(v for *_, v in read_all(bs, "out", 2)) == want

    # The map-only plan reads and writes in the same task: the input offsets were committed in
    # the output transactions, to the group derived from the query id.
    qid = _query_id(ckpt)
    ends = latest_offsets(bs, "in", 2)
    assert group_offsets(bs, f"oncelog-spark-{qid}") == {("in", p): n for p, n in ends.items()}
    # One marker group per task partition, holding the last committed batch + 1.
    last_batch = max(pr["batchId"] for pr in q.recentProgress if pr["numInputRows"] > 0)
    for part in (0, 1):
        marks = group_offsets(bs, f"oncelog-spark-{qid}-{part}")
        assert max(marks.values()) - 1 == last_batch


@pytest.mark.parametrize("point", ["after_commit", "before_commit"])
def test_task_failure_then_restart_writes_every_record_once(spark, spark_faults, broker, tmp_path, point: str) -> None:
    """A task of batch 1 fails once — after its transaction committed, or with its transaction
    still open — the query dies; restarted from its checkpoint, Spark re-executes batch 1: the
    committed task partition is skipped, the open transaction is aborted by the new attempt's
    init_transactions, and the output is exact."""
    bs = broker.bootstrap
    want = _setup(bs)
    ckpt = str(tmp_path / "ckpt")
    from oncelog.spark import faults

    faults.arm(spark_faults, f"{point}:fail@1", tmp_path)
    try:
        err = run_expect_failure(_pipeline(spark, bs), ckpt, fmt="oncelog", **_eos(bs))
    finally:
        faults.disarm(spark_faults)
    assert "injected fault" in err
    if point == "before_commit":
        # The failed attempt really wrote records, in a transaction that never committed.
        assert len(read_all(bs, "out", 2, isolation="read_uncommitted")) > len(read_all(bs, "out", 2))
    run_available_now(_pipeline(spark, bs), ckpt, fmt="oncelog", **_eos(bs))
    got = Counter(v for *_, v in read_all(bs, "out", 2))
    assert got == want, f"duplicates: {sum((got - want).values())}, missing: {sum((want - got).values())}"


def _rows(tag: str, n: int) -> list:
    return [pa.RecordBatch.from_pydict({"key": [f"k{i}".encode() for i in range(n)], "value": [f"{tag}-{i}".encode() for i in range(n)]})]


def test_zombie_attempt_is_fenced_and_re_execution_writes_nothing(broker, caplog) -> None:
    """Two attempts of the same (query, batch, task partition) outside Spark: the later attempt's
    InitProducerId fences the earlier one, whose commit then fails; running the task again after
    it committed writes nothing. The driver-side commit may be called any number of times."""
    bs = broker.bootstrap
    create_topics(bs, {"out": 2})
    opts = SinkOptions.parse(_eos(bs))
    ident = TaskIdent("q-zombie", 7, 0)

    zombie = txn_producer(bs, ident.transactional_id(opts.transactional_id_prefix))
    produce_in_txn(zombie, "out", [(0, b"z", b"zombie")], end=None)

    msg = exactly_once.write_task(_rows("live", 50), ident, opts)
    assert msg.records == 50 and not msg.skipped
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)

    again = exactly_once.write_task(_rows("again", 50), ident, opts)
    assert again.skipped and again.records == 0

    # Another attempt of the same task partition (say on another worker) initialises the id and
    # leaves a transaction open: the producer this process cached is now fenced. The next batch
    # notices before consuming its input, starts over with a new producer (whose
    # init_transactions aborts the other attempt's transaction) and writes every row.
    other = txn_producer(bs, ident.transactional_id(opts.transactional_id_prefix))
    produce_in_txn(other, "out", [(1, b"o", b"other-attempt")], end=None)
    with caplog.at_level("INFO", logger="oncelog.spark.exactly_once"):
        nxt = exactly_once.write_task(_rows("next", 5), TaskIdent("q-zombie", 8, 0), opts)
    assert nxt.records == 5 and not nxt.skipped
    assert "is stale" in caplog.text, "the cached producer was not found fenced"
    with pytest.raises(KafkaException):
        other.commit_transaction(10)

    writer = OncelogStreamWriter(opts, _sink_schema())
    writer.commit([msg], 7)
    writer.commit([again], 7)

    values = Counter(v for *_, v in read_all(bs, "out", 2))
    assert values == Counter([f"live-{i}".encode() for i in range(50)] + [f"next-{i}".encode() for i in range(5)])


def test_batch_write_with_the_same_write_id_is_written_once(spark, broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"out": 2})
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(300)], "key string, value string").repartition(2)
    for _ in range(2):
        df.write.format("oncelog").options(**_eos(bs, writeId="nightly-2026-11-22")).mode("append").save()
    assert Counter(v for *_, v in read_all(bs, "out", 2)) == Counter(f"v{i}".encode() for i in range(300))


def test_batch_write_without_write_id_is_refused_saying_what_to_set(spark, broker) -> None:
    """Exactly once is the default; a batch write has no stable name to remember its commits
    under unless the user gives one, so it is refused before any task runs — never downgraded."""
    bs = broker.bootstrap
    create_topics(bs, {"out": 2})
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="writeId") as info:
        df.write.format("oncelog").option("kafka.bootstrap.servers", bs).option("topic", "out").mode("append").save()
    assert "at_least_once" in str(info.value)
    assert read_all(bs, "out", 2, isolation="read_uncommitted") == []


def _sink_schema():
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
