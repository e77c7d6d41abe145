"""WriteTxnMarkers (27) from outside (issue 15; the admin's abort of kafka-transactions.sh, and the
request a transaction coordinator on another broker sends): a hanging transaction holds every
read_committed consumer at the LSO until an ABORT marker is written; a marker carrying an older
coordinator epoch than the producer's last marker is refused (TRANSACTION_COORDINATOR_FENCED)
and changes nothing. The producer is confluent-kafka; the markers are crafted with kio.
"""

from __future__ import annotations

import pytest

import kafka_clients as kc
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration
TOPIC = "held"


def _markers(c: ProtocolClient, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> ErrorCode:
    m = c.classes(apis.WRITE_TXN_MARKERS, 1)
    body = m["WriteTxnMarkersRequest"](markers=(m["WritableTxnMarker"](
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=(m["WritableTxnMarkerTopic"](name=TOPIC, partition_indexes=(0,)),)),))
    resp = c.request(apis.WRITE_TXN_MARKERS, body, version=1)
    return ErrorCode(resp.markers[0].topics[0].partitions[0].error_code)


def _first_batch(b: BrokerProcess) -> records.BatchHeader:
    (segment,) = sorted((b.data_dir / f"{TOPIC}-0").glob("*.log"))
    return records.parse_header(segment.read_bytes())


def test_admin_abort_releases_read_committed_and_a_stale_coordinator_is_fenced(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    kc.create_topic("confluent", broker.bootstrap, TOPIC, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "held-txn", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"committed", partition=0)
    p.commit_transaction(30)  # a COMMIT marker from the coordinator (epoch 0 on a fresh broker)
    p.begin_transaction()
    p.produce(TOPIC, b"hanging", partition=0)
    assert p.flush(30) == 0  # written, never committed: the producer goes away
    h = _first_batch(broker)

    seen = kc.consume("confluent", broker.bootstrap, TOPIC, [0], expected=2, isolation="read_committed",
                      timeout=4, settle=0)
    assert [v for _p, _o, _k, v in seen] == [b"committed"]  # held at the LSO

    c = ProtocolClient(broker.bootstrap)
    try:
        assert _markers(c, h.producer_id, h.producer_epoch, True, -1) == ErrorCode.transaction_coordinator_fenced
        assert _markers(c, h.producer_id, h.producer_epoch, False, 0) == ErrorCode.none
        assert _markers(c, h.producer_id, h.producer_epoch, False, 0) == ErrorCode.none  # idempotent
    finally:
        c.sock.close()
    kc.produce("confluent", broker.bootstrap, TOPIC, [(0, None, b"after")])
    seen = kc.consume("confluent", broker.bootstrap, TOPIC, [0], expected=2, isolation="read_committed",
                      timeout=30, settle=0.5)
    assert [v for _p, _o, _k, v in seen] == [b"committed", b"after"]
