"""ACLs in cluster mode (issue 18): two brokers on one real PostgreSQL enforce the same ACLs,
kept in the store. The first ACLs are given before the brokers start with ``oncelog acls add
--store`` (the admin: User:ANONYMOUS from 127.0.0.2); an ACL created through one broker is
enforced by the other within a bound (notification, or its next poll) on a live connection, and
a removal likewise. A transaction across both brokers commits with ACLs on, given the peer
gap's documented grant: CLUSTER_ACTION for the brokers' (unauthenticated) principal and host.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import acl_harness as h
import kafka_clients as kc
from cluster_procs import brokers
from oncelog.acl.model import AclBinding, AclFilter, AclOperation as Op, PatternType, PermissionType, ResourceType as R
from oncelog.admin.acls import WireAcls
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode as E

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
         **h.ACL_OVERRIDES}
MS = datetime.timedelta(milliseconds=1)


def _seed(dsn: str) -> None:
    for args in (["--cluster"], ["--topic", "*"], ["--group", "*"], ["--transactional-id", "*"]):
        subprocess.run([sys.executable, "-m", "oncelog", "acls", "add", "--store", dsn, "--allow-principal",
                        h.ANONYMOUS, "--allow-host", h.ADMIN_HOST, "--operation", "All", *args],
                       check=True, capture_output=True, timeout=60)


def _metadata_code(c: ProtocolClient, topic: str) -> E:
    m = c.classes(apis.METADATA, 12)
    r = c.request(apis.METADATA, m["MetadataRequest"](topics=(m["MetadataRequestTopic"](name=topic,
                  topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False), version=12)
    return E(r.topics[0].error_code)


def _wait_for(c: ProtocolClient, topic: str, code: E, bound_s: float = 10.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < bound_s:
        if _metadata_code(c, topic) == code:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{topic}: {code.name} not seen within {bound_s}s")


def test_acls_are_shared_by_every_broker(pg_dsn: str, tmp_path: Path) -> None:
    _seed(pg_dsn)
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as (b1, b2):
        admin1 = WireAcls(b1.bootstrap, source_host=h.ADMIN_HOST)
        admin2 = WireAcls(b2.bootstrap, source_host=h.ADMIN_HOST)
        subject2 = ProtocolClient(b2.bootstrap, source_host=h.SUBJECT_HOST)
        try:
            kc_admin = ProtocolClient(b1.bootstrap, source_host=h.ADMIN_HOST)
            m = kc_admin.classes(apis.CREATE_TOPICS, 5)
            r = kc_admin.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](topics=(m["CreatableTopic"](
                name="shared", num_partitions=2, replication_factor=1, assignments=(), configs=()),),
                timeout=10000 * MS, validate_only=False), version=5)
            kc_admin.close()
            assert r.topics[0].error_code == E.none
            assert _metadata_code(subject2, "shared") == E.topic_authorization_failed

            grant = AclBinding(R.TOPIC, "shared", PatternType.LITERAL, h.ANONYMOUS, h.SUBJECT_HOST, Op.DESCRIBE,
                               PermissionType.ALLOW)
            admin1.add([grant])  # through broker 1 ...
            took = _wait_for(subject2, "shared", E.none)  # ... enforced by broker 2, same connection
            assert took < 10
            assert {b.name for b in admin2.list([AclFilter(R.TOPIC, "shared", PatternType.ANY, None, None, Op.ANY,
                                                           PermissionType.ANY)])} == {"shared"}
            admin2.remove([AclFilter(R.TOPIC, "shared", PatternType.LITERAL, h.ANONYMOUS, h.SUBJECT_HOST, Op.ANY,
                                     PermissionType.ANY)])
            subject1 = ProtocolClient(b1.bootstrap, source_host=h.SUBJECT_HOST)
            try:
                _wait_for(subject1, "shared", E.topic_authorization_failed)
            finally:
                subject1.close()

            # a transaction across both brokers with ACLs on (the peers' markers need CLUSTER_ACTION)
            g = [AclBinding(R.CLUSTER, "kafka-cluster", PatternType.LITERAL, h.ANONYMOUS, h.SUBJECT_HOST,
                            Op.CLUSTER_ACTION, PermissionType.ALLOW)]
            g += [AclBinding(R.TOPIC, "shared", PatternType.LITERAL, h.ANONYMOUS, h.SUBJECT_HOST, op,
                             PermissionType.ALLOW) for op in (Op.WRITE, Op.READ)]
            g.append(AclBinding(R.TRANSACTIONAL_ID, "c-tx", PatternType.LITERAL, h.ANONYMOUS, h.SUBJECT_HOST,
                                Op.WRITE, PermissionType.ALLOW))
            admin1.add(g)
            _wait_for(subject2, "shared", E.none)
            from confluent_kafka import Producer

            p = Producer({"bootstrap.servers": b1.bootstrap, "transactional.id": "c-tx"})
            p.init_transactions(30)
            p.begin_transaction()
            for part in (0, 1):
                p.produce("shared", f"p{part}".encode(), partition=part)
            p.commit_transaction(30)
            got = kc.consume("kafka-python", b2.bootstrap, "shared", [0, 1], expected=2,
                             isolation="read_committed", timeout=60)
            assert sorted(v for *_x, v in got) == [b"p0", b"p1"]
        finally:
            subject2.close()
            admin1.close()
            admin2.close()
