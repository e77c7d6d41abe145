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
from cluster_procs import brokers, coordinator_node
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing, records
from oncelog.protocol.messages import make
from twopc_requests import INVALID_TXN_STATE, NONE, add_partitions, init_pid

SMALL = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
TOPIC = "guarded"


def _leader(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    for _ in range(50):
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
        leader = md.topics[TOPIC].partitions[0].leader
        if leader >= 0:
            return leader
        time.sleep(0.2)
    raise AssertionError(f"{TOPIC}-0 has no leader")


def _offsets(bootstrap: str, topic: str = TOPIC, partition: int = 0) -> tuple[int, int]:
    """(high watermark, last stable offset) of the partition, by ListOffsets latest."""
    out = []
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.LIST_OFFSETS, 7)
        for isolation in (0, 1):
            req = make(m["ListOffsetsRequest"], replica_id=-1, isolation_level=isolation, topics=(
                m["ListOffsetsTopic"](name=topic, partitions=(make(m["ListOffsetsPartition"], partition_index=partition,
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
        tid = next(t for t in (f"guard-{i}" for i in range(200)) if coordinator_node(bootstrap, 1, t) != leader)
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


def test_offsets_whose_transaction_ends_during_their_verification_are_refused(pg_dsn: str, tmp_path: Path) -> None:
    """The same for a TxnOffsetCommit (v3, transactions version 1): the group's coordinator is
    one broker, the transaction's the other (stopped while the offsets are verified), and the
    transaction's COMMIT marker reaches the group's ``__consumer_offsets`` partition meanwhile.
    The offsets are refused, INVALID_TXN_STATE, and the partition has no transaction left open
    (before the guard they were written after the marker: pending offsets that the producer's
    next COMMIT would have made the group's)."""
    from oncelog.coordinator.placement import partition_for

    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, 1)
        by_node = {n: b for n, b in zip((1, 2), procs)}
        group = "guarded-group"
        gnode = coordinator_node(bootstrap, 0, group)
        tid = next(t for t in (f"offsets-guard-{i}" for i in range(200)) if coordinator_node(bootstrap, 1, t) != gnode)
        gbroker, coord = by_node[gnode], by_node[3 - gnode]
        offsets_partition = partition_for(group, int(SMALL["offsets.topic.num.partitions"]))

        with ProtocolClient(coord.bootstrap) as cc, ProtocolClient(gbroker.bootstrap) as gc, \
                ProtocolClient(gbroker.bootstrap) as mc:
            err, pid, epoch, _, _ = init_pid(cc, tid, version=4)
            assert err == NONE
            a = cc.classes(apis.ADD_OFFSETS_TO_TXN, 3)
            added = cc.request(apis.ADD_OFFSETS_TO_TXN, a["AddOffsetsToTxnRequest"](
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group), version=3)
            assert added.error_code == NONE
            os.kill(coord.pid, signal.SIGSTOP)  # the group coordinator's verification waits for this broker
            try:
                t = gc.classes(apis.TXN_OFFSET_COMMIT, 3)
                gc.request(apis.TXN_OFFSET_COMMIT, make(t["TxnOffsetCommitRequest"], transactional_id=tid,
                                                        group_id=group, producer_id=pid, producer_epoch=epoch,
                                                        generation_id=-1, member_id="", group_instance_id=None,
                                                        topics=(t["TxnOffsetCommitRequestTopic"](name=TOPIC, partitions=(
                                                            make(t["TxnOffsetCommitRequestPartition"], partition_index=0,
                                                                 committed_offset=42, committed_leader_epoch=-1,
                                                                 committed_metadata=""),)),)),
                           version=3, expect_response=False)
                time.sleep(2.0)  # the group coordinator asks the stopped transaction coordinator (its wait: 5 s)
                w = mc.classes(apis.WRITE_TXN_MARKERS, 1)
                resp = mc.request(apis.WRITE_TXN_MARKERS, w["WriteTxnMarkersRequest"](markers=(
                    w["WritableTxnMarker"](producer_id=pid, producer_epoch=epoch, transaction_result=True,
                                           coordinator_epoch=0, topics=(w["WritableTxnMarkerTopic"](
                                               name="__consumer_offsets", partition_indexes=(offsets_partition,)),)),)),
                    version=1)
                assert resp.markers[0].topics[0].partitions[0].error_code == NONE
            finally:
                os.kill(coord.pid, signal.SIGCONT)
            _corr, answer = framing.decode_response(apis.TXN_OFFSET_COMMIT, 3, gc.recv_frame())
            code = answer.topics[0].partitions[0].error_code
        assert code == INVALID_TXN_STATE, f"the late offsets were answered {code}, not INVALID_TXN_STATE"
        hw, lso = _offsets(gbroker.bootstrap, "__consumer_offsets", offsets_partition)
        assert hw == lso, f"__consumer_offsets-{offsets_partition}: high watermark {hw}, LSO {lso}: a transaction is open"
