"""Fetch sizes under hostile clients (docs/RELIABILITY.md, "Fetch sizes, diskless damage and
the request memory"; R22): what one Fetch or ShareFetch can make the broker hold.

* A Fetch asking for 2 GB of a 400 MB partition over TLS took the broker's RSS from 41 to
  1,177 MB: no broker-side ``fetch.max.bytes``, and the answer was read into memory whole, then
  encrypted whole (plaintext uses sendfile and held nothing). Now the answer is capped at
  ``fetch.max.bytes`` (55 MB, Kafka's default) and a TLS answer goes out in 256 KiB pieces, each
  read and encrypted once the socket took the one before.
* A ShareFetch for one record (``max_records=1``) asking for 2 GB read the whole partition
  to answer one batch (RSS 46 → 410 MB, the event loop stalled 0.4 s). Now the read stops once
  it holds what ``max_records`` can take, and never past ``fetch.max.bytes``.

One broker (PLAINTEXT and SSL listeners) and one partition of 1 MB batches for the module; the
peak RSS (VmHWM) is reset before each request. ``make test`` fills 70 MB; the ``long`` version
400 MB, as found.
"""

from __future__ import annotations

import datetime
import os
import struct
import time
from pathlib import Path
from typing import Iterator

import pytest

from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, framing, records
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make
from oncelog_tools.tls_certs import make_pki
from proc_memory import MIB, peak, reset_peak, rss
from test_groups_share import FAST, set_group_configs
from test_groups_share_protocol import _heartbeat, _topic_id

pytestmark = pytest.mark.integration
#: These tests measure the broker's memory: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False

TOPIC = "big"
FETCH_MAX_BYTES = 57_671_680  # the broker default (Kafka's)
BATCH = 10 * 100_000  # a batch: 10 records of 100 kB
MS = datetime.timedelta(milliseconds=1)


class Env:
    def __init__(self, broker: BrokerProcess, tls: str, ca: str, size_mb: int) -> None:
        self.broker, self.tls, self.ca, self.size_mb = broker, tls, ca, size_mb


@pytest.fixture(scope="module", params=[pytest.param(70, id="70MB"),
                                        pytest.param(400, marks=pytest.mark.long, id="400MB")])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("fetch-sizes")
    pki = make_pki(base / "pki")
    plain, tls = free_port(), free_port()
    b = BrokerProcess(base / "broker", port=plain, overrides={
        **FAST, "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.keystore.location": str(pki.server)})
    b.start()
    try:
        _fill(b.bootstrap, request.param)
        set_group_configs(b.bootstrap, "sg", {"share.auto.offset.reset": "earliest"})
        yield Env(b, f"127.0.0.1:{tls}", str(pki.ca), request.param)
    finally:
        assert b.stop() == 0, b.log_tail()


def _fill(bootstrap: str, size_mb: int) -> None:
    """``size_mb`` batches of 1 MB in partition 0 of TOPIC, through raw Produce requests."""
    with ProtocolClient(bootstrap, timeout=60) as c:
        m = c.classes(apis.CREATE_TOPICS)
        res = c.request(apis.CREATE_TOPICS, make(m["CreateTopicsRequest"], topics=(make(
            m["CreatableTopic"], name=TOPIC, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=30_000 * MS, validate_only=False))
        assert res.topics[0].error_code == ErrorCode.none, res
        mp = c.classes(apis.PRODUCE, 9)
        value = os.urandom(100_000)
        for _ in range(size_mb):
            batch = records.build_batch([(None, value, ())] * 10, timestamp_ms=int(time.time() * 1000))
            r = c.request(apis.PRODUCE, make(mp["ProduceRequest"], transactional_id=None, acks=1, timeout=30_000 * MS,
                                             topic_data=(make(mp["TopicProduceData"], name=TOPIC, partition_data=(
                                                 make(mp["PartitionProduceData"], index=0, records=batch),)),)),
                          version=9)
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.none, r


def _fetch_everything(c: ProtocolClient) -> int:
    """A Fetch v11 of TOPIC-0 from offset 0 asking for 2 GB (in all and for the partition); the
    answer read from the socket piece by piece (never held whole here): its size."""
    m = c.classes(apis.FETCH, 11)
    req = make(m["FetchRequest"], replica_id=-1, max_wait=0 * MS, min_bytes=1, max_bytes=0x7FFFFFFF,
               isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
               topics=(make(m["FetchTopic"], topic=TOPIC, partitions=(make(
                   m["FetchPartition"], partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                   partition_max_bytes=0x7FFFFFFF),)),))
    c.send_raw(framing.encode_request(apis.FETCH, 11, 7, c.client_id, req))
    (size,) = struct.unpack(">i", c._recv_exact(4))
    left = size
    while left:
        chunk = c.sock.recv(min(1 << 20, left))
        assert chunk, "the broker closed the connection mid-answer"
        left -= len(chunk)
    return size


def test_a_fetch_of_a_large_partition_over_tls_is_capped_and_streamed(env: Env) -> None:
    pid = env.broker.pid
    with ProtocolClient(env.tls, timeout=120, security={"security.protocol": "SSL", "ssl.ca.location": env.ca}) as c:
        time.sleep(0.5)
        before = rss(pid)
        reset_peak(pid)
        size = _fetch_everything(c)
        grew = peak(pid) - before
    assert size <= FETCH_MAX_BYTES + BATCH + 4096, f"a {size / MIB:.0f} MB answer past fetch.max.bytes"
    assert size >= FETCH_MAX_BYTES - BATCH - 4096 or env.size_mb * BATCH < FETCH_MAX_BYTES
    assert grew < 40 * MIB, f"the broker's RSS peaked {grew / MIB:.0f} MB above its level for a {size / MIB:.0f} MB answer"
    with ProtocolClient(env.broker.bootstrap, timeout=120) as c:  # plaintext (sendfile): the same cap
        assert _fetch_everything(c) == size


def test_a_share_fetch_of_one_record_reads_no_more_than_it_answers(env: Env) -> None:
    pid = env.broker.pid
    with ProtocolClient(env.broker.bootstrap, timeout=60) as c:
        tid = _topic_id(c, TOPIC)
        assert _heartbeat(c, "sg", "m1", 0, (TOPIC,)).error_code == ErrorCode.none
        m = c.classes(apis.SHARE_FETCH, 1)
        topic = make(m["FetchTopic"], topic_id=tid, partitions=(
            make(m["FetchPartition"], partition_index=0, acknowledgement_batches=()),))
        time.sleep(0.5)
        before = rss(pid)
        reset_peak(pid)
        t0 = time.monotonic()
        res = c.request(apis.SHARE_FETCH, make(m["ShareFetchRequest"], group_id="sg", member_id="m1",
                                               share_session_epoch=0, max_wait=500 * MS, min_bytes=1,
                                               max_bytes=0x7FFFFFFF, max_records=1, batch_size=1, topics=(topic,),
                                               forgotten_topics_data=()), version=1)
        took = time.monotonic() - t0
        grew = peak(pid) - before
    assert res.error_code == ErrorCode.none, res
    p = res.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none and [(r.first_offset, r.last_offset) for r in p.acquired_records] == [(0, 9)]
    assert len(p.records) <= BATCH + 4096  # the one batch holding the record
    assert grew < 30 * MIB, f"the broker's RSS peaked {grew / MIB:.0f} MB above its level to answer one batch"
    assert took < 5.0
