"""Transaction markers from another broker's coordinator share commit rounds (issue 28).

In cluster mode a transaction coordinator sends the markers of partitions led elsewhere as
WriteTxnMarkers to their leader (broker/partitions/markers.py), one request per leader with all of
its partitions. Before issue 28's transaction work the leader wrote a request's markers one
after the other (each waiting for its COMMIT) and handled a connection's WriteTxnMarkers
requests one at a time, so k markers cost k commit rounds in a row; now every marker of a
request takes its place in its producer's line first and they are awaited together, and the
connection's next WriteTxnMarkers starts as soon as they have (broker/pipelining.py).

Observed in the store: the control batches' rows and the transactions that inserted them
(PostgreSQL's ``xmin``). One broker process on the project's PostgreSQL; the transactions are
opened with raw requests (InitProducerId, AddPartitionsToTxn v3, a transactional Produce) and the
markers written by this test acting as a coordinator on another broker, with ``ProtocolClient``.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

import kafka_clients as kc
import twopc_requests as rq
from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing
from oncelog.protocol.messages import Builder

TOPIC = "marked"
PARTITIONS = 6
MARKERS_VERSION = 1


def _wait_for_leader(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):  # bounded: 30 s
        t = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == PARTITIONS \
                and all(p.leader == 1 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError("the partitions got no leader within 30 s")


def _open_transaction(c: ProtocolClient, tid: str, partitions: list[int]) -> tuple[int, int]:
    """A transaction of ``tid`` with one batch on each of ``partitions``; (producer id, epoch).
    Each step retried while the broker is still loading (bounded: 30 s)."""
    for _ in range(150):
        err, pid, epoch, _, _ = rq.init_pid(c, tid, version=4)
        if err == 0:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"InitProducerId of {tid!r} kept failing ({err})")
    assert rq.add_partitions(c, tid, pid, epoch, TOPIC, partitions) == [0] * len(partitions)
    for p in partitions:
        for _ in range(150):
            err = rq.produce(c, tid, pid, epoch, TOPIC, p, [b"%s-%d" % (tid.encode(), p)])
            if err == 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"{TOPIC}-{p}: transactional produce kept failing ({err})")
    return pid, epoch


def _markers_frame(c: ProtocolClient, corr: int, pid: int, epoch: int, partitions: list[int]) -> bytes:
    """WriteTxnMarkers (ABORT) for ``partitions``, as a coordinator on another broker sends it."""
    m = Builder(apis.WRITE_TXN_MARKERS, MARKERS_VERSION, response=False)
    body = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
        topics=(m.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=tuple(partitions)),)),))
    return framing.encode_request(apis.WRITE_TXN_MARKERS, MARKERS_VERSION, corr, c.client_id, body)


def _answers(c: ProtocolClient, n: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """(correlation id, [(partition, error code)]) of the next ``n`` answers, in their order."""
    out = []
    for _ in range(n):
        corr, resp = framing.decode_response(apis.WRITE_TXN_MARKERS, MARKERS_VERSION, c.recv_frame())
        out.append((corr, [(p.partition_index, p.error_code) for t in resp.markers[0].topics for p in t.partitions]))
    return out


def _marker_rounds(dsn: str) -> tuple[int, int]:
    """(control batches of the topic, transactions that inserted them: distinct xmin)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*), count(DISTINCT b.xmin::text) FROM oncelog_batch b JOIN oncelog_partition p "
            "ON p.id = b.partition_id WHERE p.topic = %s AND b.is_control", (TOPIC,)).fetchone()


def test_the_markers_of_one_request_are_written_in_one_commit_round(pg_dsn: str, tmp_path: Path) -> None:
    """One WriteTxnMarkers for a transaction over six partitions of this broker: six markers,
    inserted by at most two transactions (six, one after the other, before issue 28)."""
    with brokers(pg_dsn, tmp_path, {}, (1,)) as (b,):
        kc.create_topic("confluent", b.bootstrap, TOPIC, PARTITIONS)
        _wait_for_leader(b.bootstrap)
        parts = list(range(PARTITIONS))
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            pid, epoch = _open_transaction(c, "one-request", parts)
            c.send_raw(_markers_frame(c, 100, pid, epoch, parts))
            (corr, codes), = _answers(c, 1)
        assert corr == 100 and codes == [(p, 0) for p in parts]
        batches, rounds = _marker_rounds(pg_dsn)
        assert batches == PARTITIONS
        assert rounds <= 2, f"the {PARTITIONS} markers of one request took {rounds} commit rounds"


def test_write_txn_markers_pipelined_on_one_connection_share_commit_rounds(pg_dsn: str, tmp_path: Path) -> None:
    """Six WriteTxnMarkers requests (six transactions, one partition each) written at once on one
    connection: answered in request order, every marker written, by at most three transactions
    (six, one per request, before issue 28)."""
    with brokers(pg_dsn, tmp_path, {}, (1,)) as (b,):
        kc.create_topic("confluent", b.bootstrap, TOPIC, PARTITIONS)
        _wait_for_leader(b.bootstrap)
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            txns = [_open_transaction(c, f"pipelined-{p}", [p]) for p in range(PARTITIONS)]
            corrs = list(range(200, 200 + PARTITIONS))
            c.send_raw(b"".join(_markers_frame(c, corr, pid, epoch, [p])
                                for p, (corr, (pid, epoch)) in enumerate(zip(corrs, txns))))
            got = _answers(c, PARTITIONS)
        assert [g[0] for g in got] == corrs, "answers out of request order"
        assert [g[1] for g in got] == [[(p, 0)] for p in range(PARTITIONS)]
        batches, rounds = _marker_rounds(pg_dsn)
        assert batches == PARTITIONS
        assert rounds <= PARTITIONS // 2, f"{PARTITIONS} pipelined WriteTxnMarkers took {rounds} commit rounds"
