"""The verification guard from outside, on two brokers sharing a real PostgreSQL: a client ends
its transaction while its first Produce to a partition is still being verified.

The partition's leader is one broker, the transaction's coordinator the other, so the leader
verifies the batch with AddPartitionsToTxn v4 over the network. The coordinator's broker is
SIGSTOPped while the Produce waits for that answer, and an ABORT marker for the producer reaches
the leader meanwhile (crafted WriteTxnMarkers: what the coordinator sends at EndTxn). Then the
coordinator runs again and confirms the batch — about the transaction the marker ended.

Before the guard the leader appended the batch after the marker: the Produce succeeded, and the
partition held an open transaction no coordinator knew, its LSO stuck below the high watermark
for every read_committed consumer. Now the Produce is refused, INVALID_TXN_STATE, and nothing is
written. Every wait is bounded; all traffic is on 127.0.0.1.
"""

from __future__ import annotations

import datetime
import os
import signal
import time
from pathlib import Path

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing, records
from oncelog.protocol.messages import make
from twopc_requests import INVALID_TXN_STATE, NONE, add_partitions, init_pid

SMALL = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
TOPIC = "guarded"


def _coordinator(bootstrap: str, tid: str) -> int:
    with ProtocolClient(bootstrap) as c:
        m = apis.message_class(apis.FIND_COORDINATOR, 4, False)
        for _ in range(50):
            r = c.request(apis.FIND_COORDINATOR, m(key_type=1, coordinator_keys=(tid,)), version=4)
            if r.coordinators[0].error_code == 0:
                return r.coordinators[0].node_id
            time.sleep(0.2)
    raise AssertionError(f"no coordinator for {tid!r}")


def _leader(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    for _ in range(50):
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
        leader = md.topics[TOPIC].partitions[0].leader
        if leader >= 0:
            return leader
        time.sleep(0.2)
    raise AssertionError(f"{TOPIC}-0 has no leader")


def _offsets(bootstrap: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of the partition, by ListOffsets latest."""
    out = []
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.LIST_OFFSETS, 7)
        for isolation in (0, 1):
            req = make(m["ListOffsetsRequest"], replica_id=-1, isolation_level=isolation, topics=(
                m["ListOffsetsTopic"](name=TOPIC, partitions=(make(m["ListOffsetsPartition"], partition_index=0,
                                                                   timestamp=-1),)),))
            r = c.request(apis.LIST_OFFSETS, req, version=7).topics[0].partitions[0]
            assert r.error_code == 0
            out.append(r.offset)
    return out[0], out[1]


def test_a_produce_whose_transaction_ends_during_its_verification_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, 1)
        leader = _leader(bootstrap)
        tid = next(t for t in (f"guard-{i}" for i in range(200)) if _coordinator(bootstrap, t) != leader)
        by_node = {n: b for n, b in zip((1, 2), procs)}
        lead, coord = by_node[leader], by_node[3 - leader]

        with ProtocolClient(coord.bootstrap) as cc, ProtocolClient(lead.bootstrap) as lc, \
                ProtocolClient(lead.bootstrap) as mc:
            err, pid, epoch, _, _ = init_pid(cc, tid, version=4)
            assert err == NONE
            assert add_partitions(cc, tid, pid, epoch, TOPIC, [0]) == [NONE]
            os.kill(coord.pid, signal.SIGSTOP)  # the leader's verification waits for this broker
            try:
                m = lc.classes(apis.PRODUCE, 9)
                batch = records.build_batch([(None, b"late", ())], timestamp_ms=int(time.time() * 1000),
                                            producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
                lc.request(apis.PRODUCE, make(m["ProduceRequest"], transactional_id=tid, acks=-1,
                                              timeout=datetime.timedelta(seconds=10), topic_data=(
                                                  m["TopicProduceData"](name=TOPIC, partition_data=(
                                                      m["PartitionProduceData"](index=0, records=batch),)),)),
                           version=9, expect_response=False)
                time.sleep(2.0)  # the leader has the batch and asks the stopped coordinator (its wait: 5 s)
                # the transaction ends: its ABORT marker reaches the leader (nothing of it is there yet)
                w = mc.classes(apis.WRITE_TXN_MARKERS, 1)
                resp = mc.request(apis.WRITE_TXN_MARKERS, w["WriteTxnMarkersRequest"](markers=(
                    w["WritableTxnMarker"](producer_id=pid, producer_epoch=epoch, transaction_result=False,
                                           coordinator_epoch=0, topics=(w["WritableTxnMarkerTopic"](
                                               name=TOPIC, partition_indexes=(0,)),)),)), version=1)
                assert resp.markers[0].topics[0].partitions[0].error_code == NONE
            finally:
                os.kill(coord.pid, signal.SIGCONT)  # the coordinator confirms the batch (stale now)
            _corr, answer = framing.decode_response(apis.PRODUCE, 9, lc.recv_frame())
            code = answer.responses[0].partition_responses[0].error_code
        assert code == INVALID_TXN_STATE, f"the late batch was answered {code}, not INVALID_TXN_STATE"
        hw, lso = _offsets(lead.bootstrap)
        assert (hw, lso) == (0, 0), f"high watermark {hw}, LSO {lso}: the refused batch must leave nothing open"
