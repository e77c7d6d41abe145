"""The source over transactional data (R23, R15): read_committed by default, batches bounded by
the last stable offset, and ranges that end on transaction markers or aborted data finish
instead of hanging (the gaps of SPARK-25005).

Needs the transaction coordinator (InitProducerId with transactional.id, EndTxn, markers)."""

from __future__ import annotations

from collections import Counter

import pytest

from sparkutil import create_topics, items, produce, produce_in_txn, run_available_now, stream, txn_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_source_reads_exactly_the_committed_data_with_aborted_and_open_transactions(spark, broker, tmp_path) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"tx": 2})
    plain = items(60, 2, "plain")
    committed1 = items(40, 2, "c1")
    aborted = items(30, 2, "ab")
    committed2 = items(20, 2, "c2")  # ends with COMMIT markers: the partitions' last offsets
    pending = items(10, 2, "open")
    produce(bs, "tx", plain)
    p = txn_producer(bs, "src-writer")
    produce_in_txn(p, "tx", committed1, end="commit")
    produce_in_txn(p, "tx", aborted, end="abort")
    produce_in_txn(p, "tx", committed2, end="commit")
    other = txn_producer(bs, "src-writer-open")
    produce_in_txn(other, "tx", pending, end=None)  # open: the LSO stops at its first offset
    visible = Counter(v for _, _, v in plain + committed1 + committed2)

    # Streaming, small batches so that range ends fall on markers and inside aborted data.
    ckpt = str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe="tx", startingOffsets="earliest", maxOffsetsPerTrigger="17")
    rows: list = []
    q = run_available_now(df, ckpt, into=rows, timeout=240)
    assert Counter(bytes(r["value"]) for _, r in rows) == visible
    assert sum(1 for pr in q.recentProgress if pr["numInputRows"] > 0) >= 5

    # Batch read: the same committed data, nothing past the LSO.
    batch = spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "tx").load().collect()
    assert Counter(bytes(r["value"]) for r in batch) == visible

    # read_uncommitted sees the aborted records too (still not the markers).
    dirty = (
        spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "tx")
        .option("kafka.isolation.level", "read_uncommitted").load().collect()
    )
    assert Counter(bytes(r["value"]) for r in dirty) == visible + Counter(v for _, _, v in aborted + pending)

    # Once the open transaction commits, the restarted query reads exactly it.
    other.commit_transaction(30)
    more: list = []
    run_available_now(df, ckpt, into=more, timeout=240)
    assert Counter(bytes(r["value"]) for _, r in more) == Counter(v for _, _, v in pending)
