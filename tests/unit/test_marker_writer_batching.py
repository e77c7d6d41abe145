"""A transaction coordinator's requests to its peers (issue 28): the markers of one transaction
go to each partition's leader in one WriteTxnMarkers per leader, and a verification
(AddPartitionsToTxn) never waits behind a peer's markers.

The peer here is a small asyncio server on 127.0.0.1 that reads real request frames and
answers each connection's requests in order, as a broker does (broker/network/server.py); its
WriteTxnMarkers answers can be held back, as a broker's wait for its COMMIT."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from pathlib import Path

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.membership.peer_client import PeerClients
from oncelog.broker.partitions.markers import ClusterMarkerWriter
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.broker.partitions.txn_verifier import RemoteVerifier
from oncelog.clock import SystemClock
from oncelog.cluster.leadership import Leadership
from oncelog.cluster.membership import BrokerInfo
from oncelog.cluster.topics import TopicInfo
from oncelog.cluster.view import ClusterView
from oncelog.coordinator.transaction.shard import MarkerJob
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode, NotLeaderOrFollower, UnknownTopicOrPartition
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition


class _Peer:
    """Node 2: answers WriteTxnMarkers (every partition NONE, after ``marker_delay_s``) and
    AddPartitionsToTxn (NONE, at once), each connection's requests one at a time, in order."""

    def __init__(self, marker_delay_s: float = 0.0) -> None:
        self.marker_delay_s = marker_delay_s
        self.markers: list[list[TopicPartition]] = []  # the partitions of each WriteTxnMarkers received
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(1000):  # bounded
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                req = framing.decode_request(await reader.readexactly(size))
                writer.write(b"".join(bytes(p) for p in await self._answer(req)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, req: framing.Request) -> list:
        m = Builder(req.api_key, req.api_version)
        if req.api_key == apis.WRITE_TXN_MARKERS:
            marker = req.body.markers[0]
            self.markers.append([TopicPartition(t.name, i) for t in marker.topics for i in t.partition_indexes])
            await asyncio.sleep(self.marker_delay_s)
            body = m.WriteTxnMarkersResponse(markers=(m.WritableTxnMarkerResult(
                producer_id=marker.producer_id, topics=tuple(m.WritableTxnMarkerTopicResult(
                    name=t.name, partitions=tuple(m.WritableTxnMarkerPartitionResult(partition_index=i, error_code=ErrorCode.none)
                                                  for i in t.partition_indexes)) for t in marker.topics)),))
        else:
            assert req.api_key == apis.ADD_PARTITIONS_TO_TXN
            txn = req.body.transactions[0]
            body = m.AddPartitionsToTxnResponse(error_code=ErrorCode.none, results_by_transaction=(
                m.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=tuple(
                    m.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=tuple(
                        m.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=ErrorCode.none)
                        for p in t.partitions)) for t in txn.topics)),))
        return framing.encode_response(req.api_key, req.api_version, req.correlation_id, body)


def _view(port: int, leaders: dict[TopicPartition, int]) -> ClusterView:
    brokers = (BrokerInfo(1, "127.0.0.1", 1, None, 1, True), BrokerInfo(2, "127.0.0.1", port, None, 1, True),
               BrokerInfo(3, "127.0.0.1", 1, None, 1, False))
    topics = {name: TopicInfo(name, uuid.uuid4(), 8) for name in {tp.topic for tp in leaders}}
    leads = {tp: Leadership(i + 1, tp.topic, tp.partition, node, 5, 0, 1000) for i, (tp, node) in enumerate(leaders.items())}
    return ClusterView(brokers, topics, leads)


def test_a_transactions_markers_go_to_a_peer_in_one_request(tmp_path: Path) -> None:
    """Four partitions led by node 2, one whose leader is not live, one of a deleted topic: one
    WriteTxnMarkers to node 2 with its four; the others' outcomes are their own errors."""
    led = [TopicPartition("out", p) for p in range(4)]
    leaderless = TopicPartition("out", 5)
    gone = TopicPartition("deleted", 0)

    async def go() -> tuple[list, list]:
        peer = _Peer()
        port = await peer.start()
        view = _view(port, {**{tp: 2 for tp in led}, leaderless: -1})
        peers = PeerClients(1, lambda node: ("127.0.0.1", port) if node == 2 else None)
        replicas = ReplicaManager(BrokerConfig(data_dir=tmp_path, node_id=1), SystemClock())
        writer = ClusterMarkerWriter(1, replicas, None, lambda: view, peers)
        job = MarkerJob("t", 4000, 3, True, 7, frozenset(led + [leaderless, gone]))
        try:
            outcomes = await writer.write_all(job, [*led, leaderless, gone], 0)
        finally:
            peers.close()
            assert peer.server is not None
            peer.server.close()
        return outcomes, peer.markers

    outcomes, requests = asyncio.run(go())
    assert requests == [led], f"WriteTxnMarkers requests received: {requests}"
    assert outcomes[:4] == [None] * 4
    assert isinstance(outcomes[4], NotLeaderOrFollower)
    assert isinstance(outcomes[5], UnknownTopicOrPartition)


def test_a_verification_does_not_wait_behind_a_peers_markers(tmp_path: Path) -> None:
    """A WriteTxnMarkers that node 2 answers only after 4 s (its COMMIT), then a verification of
    a produce (AddPartitionsToTxn, answered at once): the verification is answered long before
    the markers (on one shared connection it waited for them: node 2 answers in order)."""
    tp = TopicPartition("out", 0)

    async def go() -> tuple[float, float]:
        peer = _Peer(marker_delay_s=4.0)
        port = await peer.start()
        view = _view(port, {tp: 2, TopicPartition("__transaction_state", 0): 2})
        peers = PeerClients(1, lambda node: ("127.0.0.1", port) if node == 2 else None)
        replicas = ReplicaManager(BrokerConfig(data_dir=tmp_path, node_id=1), SystemClock())
        writer = ClusterMarkerWriter(1, replicas, None, lambda: view, peers)
        verifier = RemoteVerifier(lambda: view, peers, lambda tid: 0)
        t0 = time.monotonic()
        try:
            markers = asyncio.ensure_future(writer.write(MarkerJob("t", 4000, 3, True, 7, frozenset({tp})), tp, 0))
            await asyncio.sleep(0.2)  # the markers are on their way first
            await verifier.verify("u", 4001, 0, tp)
            verified = time.monotonic() - t0
            await markers
            written = time.monotonic() - t0
        finally:
            peers.close()
            assert peer.server is not None
            peer.server.close()
        return verified, written

    verified, written = asyncio.run(go())
    assert written >= 4.0
    assert verified < 2.5, f"the verification waited {verified:.1f} s behind the markers"
