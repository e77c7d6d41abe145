"""The idempotent producer on the wire (R5, R6, R7), with crafted Produce requests.

A protocol-level client (``ProtocolClient`` on kio, record batches from ``records.build_batch``)
sends what a real producer's retries could send, and some things no correct producer sends:

* the same batch twice: the second answer is success with the SAME base offset, and the log holds
  the records once (read back with a real consumer);
* a sequence gap: OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* a stale epoch (the producer id wrote with epoch 0, then a batch with epoch 1 and sequence 0):
  INVALID_PRODUCER_EPOCH (47);
* a producer id the partition does not know, with a sequence other than 0: UNKNOWN_PRODUCER_ID
  (59, as the issue and KIP-360 ask; note that Kafka 2.5+ brokers accept such a batch for a
  non-transactional producer, see docs/IDEMPOTENCE.md);
* the 6th-newest batch replayed: only the last 5 batches of a producer are remembered (R6), so
  this batch is neither a known duplicate nor the next sequence: OUT_OF_ORDER_SEQUENCE_NUMBER.
  Kafka does exactly the same (``ProducerStateEntry`` keeps 5 batches, ``checkSequence`` refuses
  what is not last+1); it never writes such a batch twice. A real producer never has more than
  5 batches in flight per partition, so it cannot replay one older than the window.

Each stateful check is run on a fresh broker and right after a restart of the broker: a clean
SIGTERM restart (producer snapshot written on close), a SIGKILL restart (state from the last
roll snapshot plus a replay of the log after it) and a restart with every ``*.snapshot`` file
deleted (state rebuilt from the whole log); each of those with the default segment size and with
a tiny ``segment.bytes`` so that snapshots written at segment roll are exercised.

InitProducerId without a transactional.id returns distinct producer ids, also across a SIGKILL
restart (producer-id blocks, R5); a KIP-360 request naming its current id and epoch gets a fresh
id with epoch 0, as Kafka's ``TransactionCoordinator.handleInitProducerId`` answers when the
transactional id is null.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import pytest

from kafka_clients import consume, create_topic
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, records

pytestmark = pytest.mark.integration

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59

RECORDS_PER_BATCH = 3
#: batches written by producer A before the checks: more than the 5 remembered
HISTORY = 8
#: small enough that the partition rolls every few batches (a batch of 3 records is ~110 bytes)
SMALL_SEGMENT_BYTES = 250


class Wire:
    """Crafted InitProducerId and Produce requests over one connection."""

    def __init__(self, bootstrap: str) -> None:
        self.c = ProtocolClient(bootstrap, client_id="idempotence-test")

    def init_producer_id(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        v = self.c.version_for(apis.INIT_PRODUCER_ID)
        cls = self.c.classes(apis.INIT_PRODUCER_ID, v)["InitProducerIdRequest"]
        kw = dict(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60))
        if v >= 3:
            kw.update(producer_id=producer_id, producer_epoch=producer_epoch)
        resp = self.c.request(apis.INIT_PRODUCER_ID, cls(**kw), version=v)
        assert resp.error_code == NONE, resp
        return resp.producer_id, resp.producer_epoch

    def produce(self, topic: str, batch: bytes, partition: int = 0) -> tuple[int, int]:
        """(error code, base offset) of one batch sent with acks=all."""
        m = self.c.classes(apis.PRODUCE)
        req = m["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=partition, records=batch),)),),
        )
        p = self.c.request(apis.PRODUCE, req).responses[0].partition_responses[0]
        return int(p.error_code), p.base_offset

    def close(self) -> None:
        self.c.close()


def batch(pid: int, epoch: int, seq: int, tag: str, n: int = RECORDS_PER_BATCH) -> bytes:
    """A batch of ``n`` records with sequences seq..seq+n-1 and unique values ``tag-i``."""
    return records.build_batch(
        [(None, f"{tag}-{i}".encode(), []) for i in range(n)],
        timestamp_ms=1_700_000_000_000, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
    )


@dataclass
class History:
    """What the test wrote and where, to compare with the log afterwards."""

    topic: str
    pid_a: int = -1
    a_batches: list[tuple[bytes, int]] = field(default_factory=list)  # (bytes, base offset)
    pid_b: int = -1
    values: list[bytes] = field(default_factory=list)  # every record value, in log order

    def wrote(self, b: bytes, base: int) -> None:
        assert base == len(self.values), f"batch appended at {base}, {len(self.values)} expected"
        self.values += [r.value for r in records.iter_records(b)]


def write_history(w: Wire, h: History) -> None:
    """Producer A: HISTORY in-order batches. Producer B: a batch in epoch 0, then epoch 1."""
    h.pid_a, epoch = w.init_producer_id()
    assert epoch == 0
    for i in range(HISTORY):
        b = batch(h.pid_a, 0, i * RECORDS_PER_BATCH, f"a{i}")
        err, base = w.produce(h.topic, b)
        assert err == NONE, f"batch {i}: error {err}"
        h.a_batches.append((b, base))
        h.wrote(b, base)
    h.pid_b, _ = w.init_producer_id()
    for epoch, tag in ((0, "b-e0"), (1, "b-e1")):
        b = batch(h.pid_b, epoch, 0, tag)
        err, base = w.produce(h.topic, b)
        assert err == NONE, f"producer B epoch {epoch}: error {err}"
        h.wrote(b, base)


def check_state(w: Wire, h: History) -> None:
    """Every rule of R6 against the state written by ``write_history`` (possibly rebuilt, R7)."""
    # The same batch again: success, the original offset, nothing written. The newest batch and
    # one in the middle of the window (a retry that overtook newer ones) alike.
    for back in (1, 3, 5):
        b, base = h.a_batches[-back]
        assert w.produce(h.topic, b) == (NONE, base), f"duplicate of the {back}. newest batch"
    # The 6th-newest batch is outside the 5-batch window: refused, never written twice.
    b, _ = h.a_batches[-6]
    assert w.produce(h.topic, b)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A gap.
    nxt = HISTORY * RECORDS_PER_BATCH
    assert w.produce(h.topic, batch(h.pid_a, 0, nxt + 1, "gap"))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A newer epoch must start at sequence 0.
    assert w.produce(h.topic, batch(h.pid_a, 1, nxt, "new-epoch-not-0"))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A stale epoch: producer B moved on to epoch 1.
    assert w.produce(h.topic, batch(h.pid_b, 0, 3, "stale"))[0] == INVALID_PRODUCER_EPOCH
    assert w.produce(h.topic, batch(h.pid_b, 0, 0, "stale-0"))[0] == INVALID_PRODUCER_EPOCH
    # A producer id this partition has never seen, not starting at 0.
    fresh, _ = w.init_producer_id()
    assert w.produce(h.topic, batch(fresh, 0, 7, "unknown"))[0] == UNKNOWN_PRODUCER_ID
    # None of the refusals changed the state: the next batch in order is still accepted ...
    b = batch(h.pid_a, 0, nxt, "a-next")
    err, base = w.produce(h.topic, b)
    assert err == NONE
    h.wrote(b, base)
    # ... and is itself deduplicated.
    assert w.produce(h.topic, b) == (NONE, base)
    b = batch(h.pid_b, 1, RECORDS_PER_BATCH, "b-e1-next")
    err, base = w.produce(h.topic, b)
    assert err == NONE
    h.wrote(b, base)


def assert_log_is(bootstrap: str, h: History) -> None:
    """A real consumer reads every record exactly once, in the order written."""
    got = consume("confluent", bootstrap, h.topic, [0], expected=len(h.values), timeout=60, settle=0.5)
    assert [v for *_, v in got] == h.values
    assert [off for _, off, *_ in got] == list(range(len(h.values)))


RESTARTS = ["none", "sigterm", "sigkill", "no-snapshot"]


@pytest.mark.parametrize("segment_bytes", [None, SMALL_SEGMENT_BYTES], ids=["default-segments", "tiny-segments"])
@pytest.mark.parametrize("restart", RESTARTS)
def test_dedup_and_sequence_rules_survive_restart(broker_factory, restart: str, segment_bytes: int | None) -> None:
    """R6 on a live broker, and R7: the same rules hold right after each kind of restart."""
    broker = broker_factory()
    h = History(topic="idem")
    create_topic("confluent", broker.bootstrap, h.topic, 1,
                 {"segment.bytes": str(segment_bytes)} if segment_bytes else None)
    w = Wire(broker.bootstrap)
    write_history(w, h)
    w.close()
    pdir = broker.data_dir / f"{h.topic}-0"
    if segment_bytes:
        assert len(list(pdir.glob("*.log"))) >= 4, "tiny segment.bytes should have rolled the log"
        assert list(pdir.glob("*.snapshot")), "no producer snapshot written at segment roll"
    if restart == "sigterm":
        broker.stop()
        assert list(pdir.glob("*.snapshot")), "no producer snapshot written on clean shutdown"
    elif restart == "sigkill":
        broker.kill()
    elif restart == "no-snapshot":
        broker.stop()
        for p in pdir.glob("*.snapshot"):
            p.unlink()
    if restart != "none":
        broker.start()
    w = Wire(broker.bootstrap)
    try:
        check_state(w, h)
    finally:
        w.close()
    assert_log_is(broker.bootstrap, h)


def test_state_rebuilt_twice_in_a_row_is_still_exact(broker_factory) -> None:
    """A restart right after a restart (snapshot written by a broker that itself rebuilt its
    state) and a SIGKILL between two batches of the same producer lose nothing."""
    broker = broker_factory(overrides={"log.segment.bytes": str(SMALL_SEGMENT_BYTES)})
    h = History(topic="twice")
    create_topic("confluent", broker.bootstrap, h.topic, 1)
    w = Wire(broker.bootstrap)
    write_history(w, h)
    w.close()
    broker.restart(hard=False)
    broker.restart(hard=True)
    w = Wire(broker.bootstrap)
    check_state(w, h)
    w.close()
    broker.restart(hard=True)
    w = Wire(broker.bootstrap)
    b, base = h.a_batches[-1]
    # The batches appended by check_state are now the newest; the old newest is still in window.
    assert w.produce(h.topic, b) == (NONE, base)
    w.close()
    assert_log_is(broker.bootstrap, h)


def test_init_producer_id_distinct_across_sigkill(broker_factory) -> None:
    """R5: every InitProducerId without a transactional.id gets a new id with epoch 0, and ids
    handed out before a SIGKILL are never handed out again."""
    broker = broker_factory()
    w = Wire(broker.bootstrap)
    before = [w.init_producer_id() for _ in range(5)]
    w.close()
    assert all(epoch == 0 for _, epoch in before)
    assert len({pid for pid, _ in before}) == 5
    broker.kill()
    broker.start()
    w = Wire(broker.bootstrap)
    after = [w.init_producer_id() for _ in range(5)]
    assert len({pid for pid, _ in after}) == 5
    assert not {pid for pid, _ in before} & {pid for pid, _ in after}, "producer id reused after SIGKILL"
    assert min(pid for pid, _ in after) > max(pid for pid, _ in before)
    # KIP-360: a non-transactional producer naming its current id and epoch (as librdkafka does
    # after UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER) gets a fresh id, epoch 0.
    if w.c.version_for(apis.INIT_PRODUCER_ID) >= 3:
        pid, epoch = after[-1]
        new_pid, new_epoch = w.init_producer_id(producer_id=pid, producer_epoch=epoch)
        assert new_epoch == 0
        assert new_pid not in {p for p, _ in before + after}
    w.close()


def test_state_outlives_deleted_records_across_sigkill(broker_factory) -> None:
    """R7 with the log start moved past all of a producer's data (DeleteRecords here; retention
    alike) and a SIGKILL: the state comes from a roll snapshot older than the new log start. As
    Kafka since KIP-360, the producer's state outlives its data, so its next batch is in
    sequence (not UNKNOWN_PRODUCER_ID) and its last batch is still recognised as a duplicate."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    broker = broker_factory()
    h = History(topic="deleted")
    create_topic("confluent", broker.bootstrap, h.topic, 1, {"segment.bytes": str(SMALL_SEGMENT_BYTES)})
    w = Wire(broker.bootstrap)
    write_history(w, h)
    pdir = broker.data_dir / f"{h.topic}-0"
    newest = max(int(p.name.split(".")[0]) for p in pdir.glob("*.snapshot"))
    if newest == len(h.values):  # the last batch rolled the log: one more, so the snapshot lags
        b = batch(h.pid_b, 1, RECORDS_PER_BATCH, "b-e1-1")
        err, base = w.produce(h.topic, b)
        assert err == NONE
        h.wrote(b, base)
    w.close()
    end = len(h.values)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = admin.delete_records([TopicPartition(h.topic, 0, end)], request_timeout=10)
    assert next(iter(res.values())).result(timeout=30).low_watermark == end
    del admin
    assert max(int(p.name.split(".")[0]) for p in pdir.glob("*.snapshot")) < end
    broker.kill()
    broker.start()
    w = Wire(broker.bootstrap)
    b, base = h.a_batches[-1]
    assert w.produce(h.topic, b) == (NONE, base)
    err, base = w.produce(h.topic, batch(h.pid_a, 0, HISTORY * RECORDS_PER_BATCH, "a-after-delete"))
    assert (err, base) == (NONE, end)
    w.close()
