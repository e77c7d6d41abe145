"""Crafted requests about leader epochs (KIP-320), for the integration and cluster tests:
OffsetForLeaderEpoch, Fetch and ListOffsets naming one partition, through ProtocolClient."""

from __future__ import annotations

import datetime

from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.messages import make

FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3


def offset_for_leader_epoch(bootstrap: str, topic: str, partition: int, leader_epoch: int, *,
                            current_leader_epoch: int = -1, version: int = 4,
                            replica_id: int = -1) -> tuple[int, int, int]:
    """(error code, leader epoch, end offset) of one partition."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.OFFSET_FOR_LEADER_EPOCH, version)
        req = make(m["OffsetForLeaderEpochRequest"], replica_id=replica_id, topics=(m["OffsetForLeaderTopic"](
            topic=topic, partitions=(m["OffsetForLeaderPartition"](
                partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch),)),))
        r = c.request(apis.OFFSET_FOR_LEADER_EPOCH, req, version=version).topics[0].partitions[0]
    return r.error_code, r.leader_epoch, r.end_offset


def fetch(bootstrap: str, topic: str, partition: int, offset: int = 0, *, current_leader_epoch: int = -1,
          version: int = 12) -> tuple[int, int, int]:
    """(error code, high watermark, bytes of records) of one partition, without waiting."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.FETCH, version)
        req = make(m["FetchRequest"],
                   replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
                   isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                   topics=(make(m["FetchTopic"], topic=topic, partitions=(make(
                       m["FetchPartition"], partition=partition, current_leader_epoch=current_leader_epoch,
                       fetch_offset=offset, log_start_offset=-1, last_fetched_epoch=-1,
                       partition_max_bytes=1 << 20),)),))
        r = c.request(apis.FETCH, req, version=version).responses[0].partitions[0]
    return r.error_code, r.high_watermark, len(bytes(r.records or b""))


def list_offsets(bootstrap: str, topic: str, partition: int, timestamp: int = -1, *, current_leader_epoch: int = -1,
                 version: int = 7) -> tuple[int, int, int]:
    """(error code, offset, leader epoch) of one partition."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.LIST_OFFSETS, version)
        req = make(m["ListOffsetsRequest"], replica_id=-1, isolation_level=0, topics=(m["ListOffsetsTopic"](
            name=topic, partitions=(make(m["ListOffsetsPartition"], partition_index=partition,
                                         current_leader_epoch=current_leader_epoch, timestamp=timestamp),)),))
        r = c.request(apis.LIST_OFFSETS, req, version=version).topics[0].partitions[0]
    return r.error_code, r.offset, getattr(r, "leader_epoch", -1)
