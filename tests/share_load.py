"""Many share-group members in one process, by raw frames on asyncio connections (the broker's
own pipelined inter-broker client, membership/peer_client.py): for the hostile share-group
tests (tests/integration/test_hostile_share.py) and bench/share_hostile.py.

A ``Member`` joins its group (ShareGroupHeartbeat), keeps heartbeating, and share-fetches in a
loop; what it acquires it holds (explicit mode that never acknowledges) unless ``ack`` is set.
Every loop is bounded in time. bench/share_hostile.py runs the same load outside pytest.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from oncelog.broker.membership.peer_client import PeerConnection
from oncelog.protocol import apis
from oncelog.protocol.messages import Builder

MS = datetime.timedelta(milliseconds=1)
ACCEPT = 1


@dataclass
class Member:
    host: str
    port: int
    group: str
    topic: str
    topic_id: uuid.UUID
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    max_records: int = 40
    max_bytes: int = 1 << 20
    wait_ms: int = 500
    ack: bool = False
    epoch: int = 0
    session_epoch: int = 0
    acquired: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    conn: PeerConnection | None = None

    def _conn(self) -> PeerConnection:
        if self.conn is None:
            self.conn = PeerConnection(-1, self.host, self.port, f"share-load-{self.member_id}")
        return self.conn

    async def heartbeat(self) -> int:
        m = Builder(apis.SHARE_GROUP_HEARTBEAT, 1, response=False)
        res = await self._conn().request(apis.SHARE_GROUP_HEARTBEAT, 1, m.ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, rack_id=None,
            subscribed_topic_names=(self.topic,) if self.epoch == 0 else None), timeout_s=60)
        if res.error_code == 0:
            self.epoch = res.member_epoch
        return int(res.error_code)

    async def fetch(self, acks: tuple[tuple[int, int], ...] = ()) -> Any:
        m = Builder(apis.SHARE_FETCH, 1, response=False)
        batches = tuple(m.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=(ACCEPT,))
                        for f, last in acks)
        topics = () if self.session_epoch > 0 and not batches else (m.FetchTopic(topic_id=self.topic_id, partitions=(
            m.FetchPartition(partition_index=0, acknowledgement_batches=batches),)),)
        res = await self._conn().request(apis.SHARE_FETCH, 1, m.ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.session_epoch,
            max_wait=self.wait_ms * MS, min_bytes=1, max_bytes=self.max_bytes, max_records=self.max_records,
            batch_size=self.max_records, topics=topics, forgotten_topics_data=()), timeout_s=60)
        if res.error_code:
            self.errors[res.error_code] = self.errors.get(res.error_code, 0) + 1
            self.session_epoch = 0
            return res
        self.session_epoch += 1
        return res

    async def run(self, until: float) -> None:
        """Join, then fetch (and heartbeat every second) until ``until`` (monotonic)."""
        if await self.heartbeat() != 0:
            return
        next_hb = time.monotonic() + 1
        pending: tuple[tuple[int, int], ...] = ()
        while time.monotonic() < until:
            if time.monotonic() >= next_hb:
                await self.heartbeat()
                next_hb = time.monotonic() + 1
            res = await self.fetch(pending)
            pending = ()
            got = [(r.first_offset, r.last_offset) for t in res.responses for p in t.partitions
                   for r in p.acquired_records]
            self.acquired += sum(last - first + 1 for first, last in got)
            if self.ack:
                pending = tuple(got)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close("done")


async def run_members(members: list[Member], seconds: float) -> None:
    until = time.monotonic() + seconds
    try:
        await asyncio.gather(*(m.run(until) for m in members))
    finally:
        for m in members:
            m.close()
