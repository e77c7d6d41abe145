"""A cluster broker answers nothing before it has loaded the cluster metadata, and never
answers Metadata with no brokers.

A broker in cluster mode binds its listeners before it registers in the store (the store
records its bound port). Then it rebalances and loads its first view. Until then it knows no
topic and no live broker. It used to serve requests in that window: a Metadata request got
every topic as UNKNOWN_TOPIC_OR_PARTITION and an empty broker list. librdkafka reads that
answer as a deleted topic once the topic has existed for ``topic.metadata.propagation.max.ms``
(30 s by default). The partitions a consumer was assigned are dropped ("partition count
changed from 3 to 0"), and in ``oncelog verify copy`` the concurrent read_committed reader never
fetched again for the rest of a 23-minute run. A restarted broker opens that window on every
start, and when its old session is still live it opens it once per failed start.
Now the listeners accept connections only after the join, as a KRaft broker serves clients
only once it has caught up with the metadata log. Until then a client's connection waits in
the backlog.

The window is held open here for real. The test takes the store's rebalance lock
(``leadership.REBALANCE_LOCK``, a PostgreSQL advisory lock), so the restarting broker binds its
listener, registers, and waits to rebalance.

A view with no live broker is the other way a Metadata answer came out with an empty broker
list. It happens after a store outage, when every session has ended and a broker polls before
its heartbeat registers it again. librdkafka decommissions every broker missing from a Metadata
answer, bootstrap brokers included. Such a broker now names itself.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.cluster.leadership import REBALANCE_LOCK
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make

TOPIC = "t"
OVERRIDES = {"broker.session.timeout.ms": "15000", "broker.heartbeat.interval.ms": "400"}


def _metadata(bootstrap: str) -> Any:
    with ProtocolClient(bootstrap, timeout=30) as c:
        m = c.classes(apis.METADATA, 12)
        return c.request(apis.METADATA, make(m["MetadataRequest"], topics=(make(
            m["MetadataRequestTopic"], topic_id=uuid.UUID(int=0), name=TOPIC),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), version=12)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_broker_that_has_not_loaded_the_cluster_metadata_never_calls_a_topic_unknown(
        pg_dsn: str, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    with brokers(pg_dsn, tmp_path, OVERRIDES, nodes=(1, 2)) as (b1, b2):
        admin = AdminClient({"bootstrap.servers": b1.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        b2.stop()
        lock = psycopg.connect(pg_dsn, autocommit=False)
        answer: list[Any] = []
        try:
            lock.execute("SELECT pg_advisory_xact_lock(%s)", (REBALANCE_LOCK,))
            starting = threading.Thread(target=b2.start, kwargs={"timeout": 60}, daemon=True)
            starting.start()
            deadline = time.monotonic() + 30
            while not _listening(b2.port) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _listening(b2.port), b2.log_tail(2000)
            # b2 is bound (and registers, then waits for the lock): no view yet. A client asks it.
            asking = threading.Thread(target=lambda: answer.append(_metadata(b2.bootstrap)), daemon=True)
            asking.start()
            asking.join(2.0)
        finally:
            lock.rollback()  # the rebalance goes on: b2 loads its first view
            lock.close()
        starting.join(60)
        asking.join(30)
        assert answer, "no answer to Metadata once the broker had joined"
        md = answer[0]
        (t,) = md.topics
        assert t.error_code == ErrorCode.none, f"a broker that knew no topic yet answered {t.error_code!r} for {TOPIC}"
        assert len(t.partitions) == 2
        assert {b.node_id for b in md.brokers} == {1, 2}


def test_a_broker_whose_view_names_no_live_broker_still_names_itself(pg_dsn: str, tmp_path: Path) -> None:
    """After a store outage every session has ended; a broker's first poll can come before its
    heartbeat registers it again, and its view then names no live broker. A Metadata answer
    with no brokers makes librdkafka decommission every broker it knows (bootstrap ones too).
    Here the heartbeat is slow (5 s) and the test ends the session in the store, so the next
    poll (every 500 ms) applies a view with no live broker."""
    from confluent_kafka.admin import AdminClient, NewTopic

    overrides = {"broker.session.timeout.ms": "15000", "broker.heartbeat.interval.ms": "5000"}
    with brokers(pg_dsn, tmp_path, overrides, nodes=(1,)) as (b1,):
        admin = AdminClient({"bootstrap.servers": b1.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        time.sleep(5.5)  # a heartbeat has just run: the next one is about 5 s away
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE oncelog_broker SET session_expires = clock_timestamp() WHERE node_id = 1")
        time.sleep(1.5)  # polls every 500 ms: the view names no live broker now
        md = _metadata(b1.bootstrap)
        assert [(b.node_id, b.port) for b in md.brokers] == [(1, b1.port)], md.brokers

