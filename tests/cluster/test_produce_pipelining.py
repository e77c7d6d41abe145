"""Produce pipelining in cluster mode (issue 28): a connection's Produce requests share COMMITs.

The collapse of issue 28 (six brokers, eight idempotent confluent-kafka producers: 7% of the
throughput while the clients burned 13.7 cores) came from long Produce round trips: the broker
handled a connection's requests strictly one at a time, so the k-th of the k Produce requests
librdkafka keeps in flight on a connection (one per partition) was answered after k COMMITs,
one round after the other; meanwhile librdkafka's idempotent producer polls without sleeping
for every partition whose next batch is past linger.ms (broker/pipelining.py). Now, once a
Produce has submitted its batches, the connection's next Produce is handled too.

The mechanism is observed in the store: the batches of N Produce requests written back to back
on one connection are inserted by the transactions of few commit rounds (PostgreSQL's ``xmin``
of their rows), not by N; the answers come in request order, and a producer's batches pipelined
to one partition are appended in their order (sequence numbers checked). One broker process on
the project's PostgreSQL; raw requests through ``ProtocolClient`` on 127.0.0.1.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import psycopg

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing, records
from oncelog.protocol.messages import make

TOPIC = "pipelined"
PARTITIONS = 8
#: the first test's topic: wide enough to hold PARTITIONS partitions on one group committer
WIDE = 4 * PARTITIONS


def _produce_frame(c: ProtocolClient, corr: int, partition: int, batch: bytes, version: int = 9) -> bytes:
    m = c.classes(apis.PRODUCE, version)
    req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                              topic_data=(m["TopicProduceData"](name=TOPIC, partition_data=(
                                  m["PartitionProduceData"](index=partition, records=batch),)),))
    return framing.encode_request(apis.PRODUCE, version, corr, c.client_id, req)


def _answers(c: ProtocolClient, corrs: list[int], version: int = 9) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of each answer, in the order they came."""
    out = []
    for _ in corrs:
        corr, resp = framing.decode_response(apis.PRODUCE, version, c.recv_frame())
        p = resp.responses[0].partition_responses[0]
        out.append((corr, p.error_code, p.base_offset))
    return out


def _wait_for_leader(bootstrap: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):  # bounded: 30 s
        t = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader == 1 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError("the partitions got no leader within 30 s")


def _warm_up(c: ProtocolClient, partitions: list[int]) -> None:
    """One record at offset 0 of each of ``partitions``, each Produce retried until the broker
    has loaded the partition it leads (NOT_LEADER_OR_FOLLOWER until then); bounded to 30 s."""
    for p in partitions:
        for _ in range(150):
            batch = records.build_batch([(None, b"warm", ())], timestamp_ms=int(time.time() * 1000))
            c.send_raw(_produce_frame(c, 1, p, batch))
            (_, err, base), = _answers(c, [1])
            if err == 0:
                assert base == 0
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"{TOPIC}-{p}: not writable within 30 s")


def _commit_rounds(dsn: str) -> int:
    """How many transactions inserted the topic's batches after the warm-up (distinct xmin of
    their rows)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(DISTINCT b.xmin::text) FROM oncelog_batch b JOIN oncelog_partition p "
            "ON p.id = b.partition_id WHERE p.topic = %s AND b.base_offset > 0", (TOPIC,)).fetchone()[0]


def _on_one_committer(dsn: str) -> list[int]:
    """PARTITIONS partitions of the topic that the broker's default number of group committers
    (``store.commit.connections``, storage/engines/postgres/commit_pool.py; 1 before issue 28) puts on the same
    committer (by store id), so their rounds are one connection's, one after the other."""
    n = getattr(BrokerConfig(), "store_commit_connections", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT partition, id FROM oncelog_partition WHERE topic = %s ORDER BY partition",
                            (TOPIC,)).fetchall()
    by_committer: dict[int, list[int]] = {}
    for partition, pid in rows:
        by_committer.setdefault(pid % n, []).append(partition)
    chosen = max(by_committer.values(), key=len)
    assert len(chosen) >= PARTITIONS, by_committer
    return chosen[:PARTITIONS]


def test_produce_requests_pipelined_on_one_connection_share_commit_rounds(pg_dsn: str, tmp_path: Path) -> None:
    """Eight Produce requests (one per partition, as librdkafka sends them; partitions of one
    group committer) written at once on one connection: all answered, in order, by at most four
    commit rounds (one per request, eight, before issue 28; typically two now: the first
    request's round, then the others')."""
    with brokers(pg_dsn, tmp_path, {}, (1,)) as (b,):
        kc.create_topic("confluent", b.bootstrap, TOPIC, WIDE)
        _wait_for_leader(b.bootstrap, WIDE)
        parts = _on_one_committer(pg_dsn)
        now = int(time.time() * 1000)
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            _warm_up(c, parts)
            corrs = list(range(1000, 1000 + PARTITIONS))
            frames = [_produce_frame(c, corr, p, records.build_batch([(None, b"v%d" % p, ())] * 10, timestamp_ms=now))
                      for p, corr in zip(parts, corrs)]
            c.send_raw(b"".join(frames))
            got = _answers(c, corrs)
        assert [g[0] for g in got] == corrs, "answers out of request order"
        assert [(g[1], g[2]) for g in got] == [(0, 1)] * PARTITIONS
        rounds = _commit_rounds(pg_dsn)
        assert 1 <= rounds <= PARTITIONS // 2, f"{PARTITIONS} pipelined Produce requests took {rounds} commit rounds"


def test_a_producers_batches_pipelined_to_one_partition_go_in_in_order(pg_dsn: str, tmp_path: Path) -> None:
    """An idempotent producer's five batches for one partition, pipelined on one connection
    (as the Java client does), then a Metadata request: every batch is appended after the one
    before it (no OUT_OF_ORDER_SEQUENCE), offsets in order, and the Metadata answer comes last."""
    with brokers(pg_dsn, tmp_path, {}, (1,)) as (b,):
        kc.create_topic("confluent", b.bootstrap, TOPIC, PARTITIONS)
        _wait_for_leader(b.bootstrap)
        now = int(time.time() * 1000)
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            _warm_up(c, [3])
            m = c.classes(apis.INIT_PRODUCER_ID, 4)
            init = c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=None,
                                                         transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                                                         producer_epoch=-1), version=4)
            assert init.error_code == 0
            pid, epoch = init.producer_id, init.producer_epoch
            corrs = list(range(2000, 2005))
            frames = [_produce_frame(c, corr, 3, records.build_batch(
                [(None, b"s%d" % i, ())] * 4, timestamp_ms=now, producer_id=pid, producer_epoch=epoch,
                base_sequence=4 * i)) for i, corr in enumerate(corrs)]
            mm = c.classes(apis.METADATA, 9)
            md = make(mm["MetadataRequest"], topics=None, allow_auto_topic_creation=False,
                      include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
            c.send_raw(b"".join(frames) + framing.encode_request(apis.METADATA, 9, 2005, c.client_id, md))
            got = _answers(c, corrs)
            corr, _md = framing.decode_response(apis.METADATA, 9, c.recv_frame())
        assert [g[0] for g in got] == corrs and corr == 2005, "answers out of request order"
        assert [(g[1], g[2]) for g in got] == [(0, 1 + 4 * i) for i in range(5)]


def test_a_produce_refused_at_once_is_answered_after_the_earlier_ones(pg_dsn: str, tmp_path: Path) -> None:
    """A Produce that fails before it submits anything (a partition that does not exist),
    between two that wait for their COMMITs: the three answers come in request order."""
    with brokers(pg_dsn, tmp_path, {}, (1,)) as (b,):
        kc.create_topic("confluent", b.bootstrap, TOPIC, PARTITIONS)
        _wait_for_leader(b.bootstrap)
        now = int(time.time() * 1000)
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            _warm_up(c, [0, 1])
            batch = records.build_batch([(None, b"x", ())], timestamp_ms=now)
            c.send_raw(_produce_frame(c, 3001, 0, batch) + _produce_frame(c, 3002, PARTITIONS + 5, batch)
                       + _produce_frame(c, 3003, 1, batch))
            got = _answers(c, [3001, 3002, 3003])
        assert [g[0] for g in got] == [3001, 3002, 3003], "answers out of request order"
        assert got[0][1:] == (0, 1) and got[2][1:] == (0, 1)
        assert got[1][1] != 0
