"""The ``oncelog`` source on a real local Spark and a real broker (R23): streaming reads with
Trigger.AvailableNow and maxOffsetsPerTrigger, resumption from a checkpoint, batch reads."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from sparkutil import batches_with_data, create_topics, items, latest_offsets, produce, run_available_now, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTS = 3


def _values(rows) -> Counter:
    return Counter(bytes(r["value"]) for _, r in rows)


def test_stream_reads_every_record_once_across_micro_batches_and_a_restart(spark, broker, tmp_path) -> None:
    """R23: offsets live in Spark's checkpoint; a restarted query resumes exactly after the last
    committed batch — nothing read twice, nothing skipped — and maxOffsetsPerTrigger splits the
    backlog into several micro-batches."""
    bs = broker.bootstrap
    create_topics(bs, {"src": PARTS})
    first = items(3000, PARTS, "a")
    produce(bs, "src", first, headers=True)
    ckpt = str(tmp_path / "ckpt")

    df = stream(spark, bs, subscribe="src", startingOffsets="earliest", maxOffsetsPerTrigger="1000", includeHeaders="true")
    rows1: list = []
    q1 = run_available_now(df, ckpt, into=rows1)
    assert _values(rows1) == Counter(v for _, _, v in first), "first run: records missing or duplicated"
    assert batches_with_data(q1) >= 3, f"maxOffsetsPerTrigger=1000 over 3000 offsets gave {batches_with_data(q1)} batches"
    assert max(p["numInputRows"] for p in q1.recentProgress) <= 1000

    # Row contents: Spark's Kafka schema, offsets per partition contiguous from 0.
    by_part: dict[int, list[int]] = {}
    for _, r in rows1:
        assert r["topic"] == "src"
        assert r["timestampType"] == 0 and r["timestamp"] is not None
        assert r["key"] is not None and bytes(r["key"]).startswith(b"k")
        assert [h["key"] for h in r["headers"]] == ["n", "empty"]
        by_part.setdefault(r["partition"], []).append(r["offset"])
    assert sorted(by_part) == list(range(PARTS))
    for p, offs in by_part.items():
        assert sorted(offs) == list(range(len(offs))), f"partition {p}: offsets not contiguous"

    # The checkpoint's last offsets are canonical JSON: topics and partitions in sorted order.
    last = sorted((tmp_path / "ckpt" / "offsets").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1)[-1]
    source_offsets = last.read_text().strip().splitlines()[-1]
    assert source_offsets == json.dumps({"src": {str(p): n for p, n in sorted(latest_offsets(bs, "src", PARTS).items())}})

    second = items(500, PARTS, "b")
    produce(bs, "src", second)
    rows2: list = []
    q2 = run_available_now(df, ckpt, into=rows2)
    assert _values(rows2) == Counter(v for _, _, v in second), "restart: not exactly the new records"
    assert batches_with_data(q2) == 1
    assert min(b for b, _ in rows2) > max(b for b, _ in rows1), "the restarted query re-ran a batch"


def test_stream_starts_at_latest_by_default_and_at_json_offsets(spark, broker, tmp_path) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"lt": 2})
    produce(bs, "lt", items(100, 2, "old"))
    # Default startingOffsets=latest: the first run fixes its start and reads nothing old.
    got: list = []
    q = run_available_now(stream(spark, bs, subscribe="lt"), str(tmp_path / "c1"), into=got)
    assert got == []
    assert batches_with_data(q) == 0
    # JSON: partition 0 from offset 40, partition 1 from earliest (-2).
    start = json.dumps({"lt": {"0": 40, "1": -2}})
    run_available_now(stream(spark, bs, subscribe="lt", startingOffsets=start), str(tmp_path / "c2"), into=got)
    assert sorted((r["partition"], r["offset"]) for _, r in got) == sorted([(0, o) for o in range(40, 50)] + [(1, o) for o in range(50)])


def test_batch_read_between_starting_and_ending_offsets(spark, broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"bt": 2, "other": 1})
    produce(bs, "bt", items(200, 2, "x"))
    produce(bs, "other", items(10, 1, "o"))

    whole = spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "bt").load()
    assert whole.count() == 200
    assert sorted(bytes(r["value"]) for r in whole.collect()) == sorted(v for _, _, v in items(200, 2, "x"))

    part = (
        spark.read.format("oncelog")
        .option("kafka.bootstrap.servers", bs)
        .option("assign", json.dumps({"bt": [1], "other": [0]}))
        .option("startingOffsets", json.dumps({"bt": {"1": 10}, "other": {"0": -2}}))
        .option("endingOffsets", json.dumps({"bt": {"1": 25}, "other": {"0": -1}}))
        .load()
        .select("topic", "partition", "offset")
        .collect()
    )
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in part) == sorted(
        [("bt", 1, o) for o in range(10, 25)] + [("other", 0, o) for o in range(10)]
    )


def test_invalid_options_fail_the_query_with_the_option_named(spark, broker) -> None:
    with pytest.raises(Exception, match="subscribe, subscribePattern, assign"):
        spark.read.format("oncelog").option("kafka.bootstrap.servers", broker.bootstrap).load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        (
            spark.read.format("oncelog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", "t").option("startingOffsets", "latest").load().collect()
        )


def test_subscribe_pattern_reads_every_matching_topic(spark, broker) -> None:
    """subscribePattern lists all topics (a Metadata request with null topics) and reads those
    whose whole name matches; internal topics never match."""
    bs = broker.bootstrap
    create_topics(bs, {"evt-a": 1, "evt-b": 2, "other": 1})
    produce(bs, "evt-a", items(10, 1, "a"))
    produce(bs, "evt-b", items(20, 2, "b"))
    produce(bs, "other", items(5, 1, "o"))
    rows = (
        spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribePattern", "evt-.*")
        .option("fetchOffset.numRetries", "0").load().select("topic").collect()
    )
    assert Counter(r["topic"] for r in rows) == {"evt-a": 10, "evt-b": 20}
