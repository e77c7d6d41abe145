"""A share group (KIP-932, issue 30) across a broker SIGKILL: three ShareConsumers in explicit
mode accept every record and commit; the broker is killed mid-stream and restarted on the same
data directory. Nothing is lost (every record ends accepted) and no record whose acceptance the
broker confirmed before the kill is delivered again after it (``__share_group_state`` holds the
acknowledgements before they are answered); only records acquired and not yet confirmed at the
kill may come again, as Kafka's at-least-once delivery allows.

Before: share groups were not served at all; with the share-partition state in memory only, the
restarted broker would redeliver every record from the group's start offset.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from test_groups_share import FAST, poll_records, set_group_configs, share_consumer

pytestmark = pytest.mark.integration


def _round(consumers: list[Any], delivered: list[tuple[int, int, float]], confirmed: dict[int, float]) -> None:
    """One poll of each consumer: accept what it got and commit; note what the broker confirmed."""
    from confluent_kafka import AcknowledgeType

    for i, c in enumerate(consumers):
        got = poll_records(c, 0.2)
        for m in got:
            delivered.append((m.offset(), i, time.monotonic()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if not got:
            continue
        try:
            results = c.commit_sync(10)
        except Exception:  # noqa: BLE001 - the broker is down: nothing confirmed
            continue
        if all(err is None for err in results.values()):
            now = time.monotonic()
            for m in got:
                confirmed.setdefault(m.offset(), now)


def test_share_group_survives_a_broker_sigkill(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("share-kill", FAST)
    create_topic("confluent", b.bootstrap, "qk", 1)
    n = 3000
    produce("confluent", b.bootstrap, "qk", [(0, None, b"v%d" % i) for i in range(n)],
            extra={"batch.num.messages": 10})
    set_group_configs(b.bootstrap, "sgk", {"share.auto.offset.reset": "earliest"})
    consumers = [share_consumer(b.bootstrap, "sgk", ["qk"], explicit=True) for _ in range(3)]
    delivered: list[tuple[int, int, float]] = []
    confirmed: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < n // 3 and time.monotonic() < deadline:
            _round(consumers, delivered, confirmed)
        assert len(confirmed) >= n // 3, f"only {len(confirmed)} confirmed before the kill"
        holder = share_consumer(b.bootstrap, "sgk", ["qk"], explicit=True)  # acquires and never acknowledges
        held: set[int] = set()
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = {m.offset() for m in poll_records(holder, 0.5)}
            _round(consumers, delivered, confirmed)
        assert held, "the holder got nothing"
        killed_at = time.monotonic()
        confirmed_before = {o for o, t in confirmed.items() if t < killed_at}
        b.restart(hard=True)  # SIGKILL, then start on the same port and data directory
        holder.close()  # its records were acquired when the broker died: they come back
        deadline = time.monotonic() + 120
        while len(confirmed) < n and time.monotonic() < deadline:
            _round(consumers, delivered, confirmed)
    finally:
        for c in consumers:
            c.close()
    assert sorted(confirmed) == list(range(n)), f"{n - len(confirmed)} record(s) never accepted"
    again = sorted({o for o, _, t in delivered if t > killed_at and o in confirmed_before})
    assert not again, f"records confirmed before the kill delivered again: {again[:20]}"
    assert held <= {o for o, _, t in delivered if t > killed_at}, "the held records were not delivered again"
    counts: dict[int, int] = {}
    for o, _, _ in delivered:
        counts[o] = counts.get(o, 0) + 1
    twice = {o for o, k in counts.items() if k > 1}
    assert not twice & confirmed_before, sorted(twice & confirmed_before)[:20]


def test_garbage_in_the_share_state_topic_is_skipped_and_the_state_survives(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """R22: records a share group's state can never hold, appended to ``__share_group_state``
    while the broker is down (a record without the key layout, a valid key with a garbage
    value, an unknown key version, a snapshot spanning 2**62 offsets, a batch that does not
    decompress), are skipped on load with one line each; the group's start offset survives and
    a share consumer starts there. Before the span bound, the huge snapshot's load iterated
    2**62 offsets: the broker never answered again."""
    import struct

    import bad_batches
    from oncelog.coordinator.share import records as srec
    from oncelog.coordinator.share.partition import RecordState, Snapshot, StateBatch
    from oncelog.protocol import records
    from oncelog.storage.config import LogConfig
    from oncelog.storage.engines.local.log import PartitionLog
    from test_groups_share_admin import _alter, _consume, _describe_offsets

    b = broker_factory("share-garbage", FAST)
    create_topic("confluent", b.bootstrap, "qg", 1)
    produce("confluent", b.bootstrap, "qg", [(0, None, b"v%d" % i) for i in range(20)])
    assert _alter(b.bootstrap, "sgg", "qg", 10).error_code == 0
    assert _describe_offsets(b.bootstrap, "sgg") == {0: (10, 10)}
    b.stop()

    now = int(time.time() * 1000)
    key = srec.SnapshotKey("sgg", __import__("uuid").uuid4(), 0)
    huge = srec.encode_value(Snapshot(0, 0, (StateBatch(0, 2**62, RecordState.ARCHIVED, 1),)))
    garbage = [
        records.build_batch([(b"k", b"v", ())], timestamp_ms=now),
        records.build_batch([(srec.encode_key(key), b"v", ())], timestamp_ms=now),
        records.build_batch([(struct.pack(">h", 77) + srec.encode_key(key)[2:], b"\x00\x01", ())], timestamp_ms=now),
        records.build_batch([(srec.encode_key(key), huge, ())], timestamp_ms=now),
        bad_batches.with_garbage_compression(records.build_batch([(b"k", b"v", ())] * 4, timestamp_ms=now)),
    ]
    plog = PartitionLog.open(b.data_dir / "__share_group_state-0", LogConfig(), now)
    try:
        bad = [plog.append(g, records.parse_header(g), now)[0] for g in garbage]
    finally:
        plog.close()

    b.start()
    assert _describe_offsets(b.bootstrap, "sgg") == {0: (10, 10)}  # the state survives the garbage
    log_text = b.log_path.read_text(errors="replace")
    for off in bad:
        assert f"at offset {off} skipped" in log_text, log_text[-3000:]
    assert sorted(_consume(b.bootstrap, "sgg", "qg", 10)) == list(range(10, 20))


def test_the_start_offset_chosen_at_the_first_fetch_survives_a_sigkill(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """``share.auto.offset.reset=latest`` (the default) picks the start offset at the group's
    first fetch of a partition; it is written before anything is acquired. Records produced after
    it are the group's even when the broker is SIGKILLed before any acknowledgement. Before, the
    start offset was written only with the first acknowledgement: after the restart the group
    started again at the new log end and records produced meanwhile were never delivered."""
    b = broker_factory("share-latest", FAST)
    create_topic("confluent", b.bootstrap, "ql", 1)
    produce("confluent", b.bootstrap, "ql", [(0, None, b"old%d" % i) for i in range(10)])
    c = share_consumer(b.bootstrap, "sgl", ["ql"], explicit=True)
    try:
        for _ in range(10):  # joins and fetches: the start offset becomes 10 (latest), nothing delivered
            assert not poll_records(c, 0.5)
        b.restart(hard=True)  # SIGKILL, then start on the same port and data directory
        produce("confluent", b.bootstrap, "ql", [(0, None, b"new%d" % i) for i in range(10)])
        got: set[int] = set()
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            from confluent_kafka import AcknowledgeType

            for m in poll_records(c, 0.5):
                got.add(m.offset())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        assert sorted(got) == list(range(10, 20)), sorted(got)
    finally:
        c.close()
