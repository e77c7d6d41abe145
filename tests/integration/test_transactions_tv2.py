"""Transactions version 2 (KIP-890 part 2) on the wire, and the KAFKA-17754 interleaving replayed
with crafted requests on both transaction versions.

KAFKA-17754 (found in Kafka by the Jepsen analysis of Bufstream): a producer's EndTxn(commit) for
transaction N is delayed in the network; the client times out, retries, the retry commits N; the
client begins N+1 and writes to it; then the first, delayed EndTxn arrives. Under transactions
version 1 it carries the same producer id and epoch as N+1's requests, so the coordinator cannot
tell it from an EndTxn of N+1: it commits N+1's first records while the producer is still
writing N+1. Here the delayed request is the very frame the client sent, held back and delivered
on a new connection (as after the client's reconnect) once N+1 has begun.

* TV2 (EndTxn v5, Produce v12, no AddPartitionsToTxn): every end bumps the epoch, so the late
  EndTxn carries N's epoch: PRODUCER_FENCED, nothing changes, N+1 stays whole.
* TV1 (EndTxn v4, AddPartitionsToTxn, Produce v11): the late EndTxn is accepted and commits N+1's
  first record; the producer's next write to N+1 and its abort are refused (INVALID_TXN_STATE),
  and read_committed readers keep a record of a transaction its producer then tried to abort.
  What oncelog does about it is in docs/TRANSACTIONS.md ("KAFKA-17754 under TV1").

Readers are a real read_committed consumer (confluent-kafka); requests are kio's classes.
"""

from __future__ import annotations

import datetime

import pytest

from kafka_clients import consume, create_topic
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing, records

pytestmark = pytest.mark.integration

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
PRODUCER_FENCED = 90


class TxnWire:
    """A transactional producer made of crafted requests, speaking transactions version
    ``tv`` (1: AddPartitionsToTxn v3, Produce v11, EndTxn v4; 2: Produce v12, EndTxn v5)."""

    def __init__(self, bootstrap: str, tid: str, tv: int) -> None:
        self.bootstrap, self.tid, self.tv = bootstrap, tid, tv
        self.c = ProtocolClient(bootstrap, client_id=f"tv{tv}-test", transaction_version=tv)
        self.seq: dict[tuple[int, str, int], int] = {}
        self.pid, self.epoch = -1, -1

    def init(self) -> None:
        m = self.c.classes(apis.INIT_PRODUCER_ID, 5)
        r = self.c.request(apis.INIT_PRODUCER_ID, m["InitProducerIdRequest"](
            transactional_id=self.tid, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1), version=5)
        assert r.error_code == NONE, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def add(self, topic: str, partition: int) -> int:
        assert self.tv == 1
        m = self.c.classes(apis.ADD_PARTITIONS_TO_TXN, 3)
        r = self.c.request(apis.ADD_PARTITIONS_TO_TXN, m["AddPartitionsToTxnRequest"](
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=(m["AddPartitionsToTxnTopic"](name=topic, partitions=(partition,)),)), version=3)
        return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

    def produce(self, topic: str, partition: int, value: bytes, epoch: int | None = None) -> int:
        epoch = self.epoch if epoch is None else epoch
        key = (epoch, topic, partition)
        seq = self.seq.get(key, 0)
        batch = records.build_batch([(None, value, [])], timestamp_ms=1_700_000_000_000, producer_id=self.pid,
                                    producer_epoch=epoch, base_sequence=seq, transactional=True)
        v = 12 if self.tv == 2 else 11
        m = self.c.classes(apis.PRODUCE, v)
        r = self.c.request(apis.PRODUCE, m["ProduceRequest"](
            transactional_id=self.tid, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=partition, records=batch),)),)), version=v)
        code = int(r.responses[0].partition_responses[0].error_code)
        if code == NONE:
            self.seq[key] = seq + 1
        return code

    def txn_offsets(self, group: str, topic: str, partition: int, offset: int, epoch: int | None = None) -> int:
        """TxnOffsetCommit (v5 for TV2: no AddOffsetsToTxn before it)."""
        v = 5 if self.tv == 2 else 3
        m = self.c.classes(apis.TXN_OFFSET_COMMIT, v)
        r = self.c.request(apis.TXN_OFFSET_COMMIT, m["TxnOffsetCommitRequest"](
            transactional_id=self.tid, group_id=group, producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch, generation_id=-1, member_id="",
            group_instance_id=None, topics=(m["TxnOffsetCommitRequestTopic"](name=topic, partitions=(
                m["TxnOffsetCommitRequestPartition"](partition_index=partition, committed_offset=offset,
                                                     committed_leader_epoch=-1, committed_metadata=""),)),)),
            version=v)
        return int(r.topics[0].partitions[0].error_code)

    def end_txn_frame(self, commit: bool) -> tuple[int, bytes]:
        """The EndTxn request as the client sends it now: (version, frame bytes)."""
        v = 5 if self.tv == 2 else 4
        m = self.c.classes(apis.END_TXN, v)
        body = m["EndTxnRequest"](transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
                                  committed=commit)
        return v, framing.encode_request(apis.END_TXN, v, 4242, "delayed", body)

    def end_txn(self, commit: bool) -> int:
        v, frame = self.end_txn_frame(commit)
        code, pid, epoch = deliver(self.bootstrap, v, frame)
        if code == NONE and self.tv == 2:
            self.pid, self.epoch = pid, epoch
            assert (pid, epoch) != (-1, -1)
        return code

    def close(self) -> None:
        self.c.close()


def deliver(bootstrap: str, version: int, frame: bytes) -> tuple[int, int, int]:
    """Send an EndTxn frame on a new connection: (error code, producer id, producer epoch)."""
    with ProtocolClient(bootstrap, client_id="delayed") as c:
        c.send_raw(frame)
        _corr, r = framing.decode_response(apis.END_TXN, version, c.recv_frame())
    return int(r.error_code), getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1)


def committed(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[bytes]:
    """What a read_committed consumer reads from partition 0 (waits for ``expected`` records,
    then half a second more for extras)."""
    return [v for *_, v in consume("confluent", bootstrap, topic, [0], expected=expected, isolation="read_committed",
                                   timeout=timeout, settle=0.5)]


def test_api_versions_advertises_transaction_version_2(broker) -> None:  # type: ignore[no-untyped-def]
    for version in (3, 4):
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.API_VERSIONS, version)
            r = c.request(apis.API_VERSIONS, m["ApiVersionsRequest"](client_software_name="t",
                                                                      client_software_version="1"), version=version)
        assert [(f.name, f.min_version_level, f.max_version_level) for f in r.finalized_features] == [
            ("transaction.version", 2, 2)]
        assert r.finalized_features_epoch >= 0
        supported = [(f.name, f.min_version, f.max_version) for f in r.supported_features]
        # as Kafka 4: below v4 a supported feature with minimum 0 is left out (KAFKA-17492)
        assert supported == ([("transaction.version", 0, 2)] if version >= 4 else [])
        keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert keys[apis.PRODUCE][1] >= 12 and keys[apis.END_TXN][1] >= 5 and keys[apis.TXN_OFFSET_COMMIT][1] >= 5


def test_tv2_every_end_bumps_the_epoch_and_the_late_end_txn_is_fenced(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "tv2-17754"
    create_topic("confluent", broker.bootstrap, topic, 1)
    w = TxnWire(broker.bootstrap, "tv2-producer", tv=2)
    w.init()
    pid, e = w.pid, w.epoch

    assert w.produce(topic, 0, b"n") == NONE  # no AddPartitionsToTxn: the leader adds the partition
    assert w.txn_offsets("tv2-group", topic, 0, 7) == NONE  # no AddOffsetsToTxn either
    _v, delayed = w.end_txn_frame(commit=True)  # transaction N's first EndTxn: lost in the network
    assert w.end_txn(commit=True) == NONE  # the client's retry commits N
    assert (w.pid, w.epoch) == (pid, e + 1)  # ... and hands the client its next epoch
    assert committed(broker.bootstrap, topic, expected=1) == [b"n"]

    assert w.produce(topic, 0, b"n+1 first") == NONE  # transaction N+1 begins, epoch e+1
    code, _, _ = deliver(broker.bootstrap, 5, delayed)  # N's EndTxn arrives at last
    assert code == PRODUCER_FENCED
    assert committed(broker.bootstrap, topic, expected=2, timeout=5) == [b"n"]  # N+1 is not committed

    assert w.produce(topic, 0, b"late write of n", epoch=e) == INVALID_PRODUCER_EPOCH
    assert w.txn_offsets("tv2-group", topic, 0, 99, epoch=e) == PRODUCER_FENCED  # N's late offsets
    assert w.produce(topic, 0, b"n+1 second") == NONE
    assert w.end_txn(commit=False) == NONE  # N+1 aborts, whole
    assert (w.pid, w.epoch) == (pid, e + 2)
    assert w.produce(topic, 0, b"n+2") == NONE
    assert w.end_txn(commit=True) == NONE
    assert committed(broker.bootstrap, topic, expected=2) == [b"n", b"n+2"]
    w.close()
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tv2-group", "enable.auto.commit": False})
    try:
        assert [tp.offset for tp in c.committed([TopicPartition(topic, 0)], timeout=20)] == [7]
    finally:
        c.close()


def test_tv1_the_late_end_txn_commits_part_of_the_next_transaction(broker) -> None:  # type: ignore[no-untyped-def]
    """What oncelog does under TV1 (documented, not a bug we can fix there): the late EndTxn has
    the same producer id and epoch as transaction N+1 and commits its first record."""
    topic = "tv1-17754"
    create_topic("confluent", broker.bootstrap, topic, 1)
    w = TxnWire(broker.bootstrap, "tv1-producer", tv=1)
    w.init()
    pid, e = w.pid, w.epoch

    assert w.add(topic, 0) == NONE
    assert w.produce(topic, 0, b"n") == NONE
    _v, delayed = w.end_txn_frame(commit=True)
    assert w.end_txn(commit=True) == NONE
    assert (w.pid, w.epoch) == (pid, e)  # TV1: the epoch stays

    assert w.add(topic, 0) == NONE  # transaction N+1, same epoch
    assert w.produce(topic, 0, b"n+1 first") == NONE
    code, _, _ = deliver(broker.bootstrap, 4, delayed)
    assert code == NONE  # indistinguishable from an EndTxn of N+1: it commits N+1 so far
    assert committed(broker.bootstrap, topic, expected=2) == [b"n", b"n+1 first"]

    # The producer goes on with N+1: part 1 verification refuses its write, and its abort
    assert w.produce(topic, 0, b"n+1 second") == INVALID_TXN_STATE
    assert w.end_txn(commit=False) == INVALID_TXN_STATE
    # ... but "n+1 first" stays committed: N+1 is torn
    assert committed(broker.bootstrap, topic, expected=3, timeout=5) == [b"n", b"n+1 first"]
    w.close()


def test_tv1_a_retried_batch_of_an_ended_transaction_is_answered_as_written(broker) -> None:  # type: ignore[no-untyped-def]
    """R6 before R12 (long run 7's lost transaction): a producer's batch is written, its answer is
    lost, the transaction is aborted, and the batch's retry arrives. The batch is in the log, so
    the retry gets its original offset, as any duplicate does. Before the fix the retry was refused
    INVALID_TXN_STATE (its transaction was over), which tells the client the batch was not written;
    librdkafka then reuses its sequence numbers in the next transaction, whose batch was taken for
    a duplicate of the aborted one and dropped while its transaction committed."""
    topic = "tv1-retry-after-abort"
    create_topic("confluent", broker.bootstrap, topic, 1)
    w = TxnWire(broker.bootstrap, "tv1-retry", tv=1)
    w.init()
    assert w.add(topic, 0) == NONE
    assert w.produce(topic, 0, b"aborted") == NONE  # sequence 0, at offset 0
    assert w.end_txn(commit=False) == NONE
    w.seq[(w.epoch, topic, 0)] = 0  # the retry of that batch, after the abort
    assert w.produce(topic, 0, b"aborted") == NONE
    assert w.seq[(w.epoch, topic, 0)] == 1

    assert w.add(topic, 0) == NONE  # the next transaction goes on at sequence 1
    assert w.produce(topic, 0, b"committed") == NONE
    assert w.end_txn(commit=True) == NONE
    assert committed(broker.bootstrap, topic, expected=1) == [b"committed"]
    w.close()
