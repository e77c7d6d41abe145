"""Crafted transactional requests through kio (``ProtocolClient``), for the two-phase commit
tests (KIP-939, issue 17): InitProducerId of any version with enable_2pc / keep_prepared_txn,
AddPartitionsToTxn v3, a transactional Produce v9 batch, EndTxn v3. Each returns error codes
(and the answer's ids), never raises for a Kafka error."""

from __future__ import annotations

import datetime
import time

from oncelog.client import ProtocolClient
from oncelog.protocol import apis, records
from oncelog.protocol.messages import make

NONE, INVALID_REQUEST, INVALID_TXN_STATE, PRODUCER_FENCED, TXN_ID_AUTHZ_FAILED = 0, 42, 48, 90, 53


def init_pid(c: ProtocolClient, tid: str | None, *, timeout_ms: int = 60_000, enable_2pc: bool = False,
             keep: bool = False, version: int = 6) -> tuple[int, int, int, int, int]:
    """(error, producer id, epoch, ongoing producer id, ongoing epoch) of InitProducerId."""
    m = c.classes(apis.INIT_PRODUCER_ID, version)
    extra = {"enable2_pc": enable_2pc, "keep_prepared_txn": keep} if version >= 6 else {}
    r = c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=tid,
                                              transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                                              **extra), version=version)
    return (r.error_code, r.producer_id, r.producer_epoch, getattr(r, "ongoing_txn_producer_id", -1),
            getattr(r, "ongoing_txn_producer_epoch", -1))


def add_partitions(c: ProtocolClient, tid: str, pid: int, epoch: int, topic: str, partitions: list[int]) -> list[int]:
    m = c.classes(apis.ADD_PARTITIONS_TO_TXN, 3)
    r = c.request(apis.ADD_PARTITIONS_TO_TXN, make(
        m["AddPartitionsToTxnRequest"], v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(m["AddPartitionsToTxnTopic"](name=topic, partitions=tuple(partitions)),)), version=3)
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def produce(c: ProtocolClient, tid: str, pid: int, epoch: int, topic: str, partition: int, values: list[bytes],
            seq: int = 0) -> int:
    """One transactional batch, acks=all; returns the error code."""
    m = c.classes(apis.PRODUCE, 9)
    batch = records.build_batch([(None, v, ()) for v in values], timestamp_ms=int(time.time() * 1000),
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    r = c.request(apis.PRODUCE, make(m["ProduceRequest"], transactional_id=tid, acks=-1,
                                     timeout=datetime.timedelta(seconds=10), topic_data=(m["TopicProduceData"](
                                         name=topic, partition_data=(m["PartitionProduceData"](
                                             index=partition, records=batch),)),)), version=9)
    return r.responses[0].partition_responses[0].error_code


def end_txn(c: ProtocolClient, tid: str, pid: int, epoch: int, commit: bool) -> int:
    m = c.classes(apis.END_TXN, 3)
    r = c.request(apis.END_TXN, m["EndTxnRequest"](transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                   committed=commit), version=3)
    return r.error_code
