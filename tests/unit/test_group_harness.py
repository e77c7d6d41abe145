"""A synchronous driver for the group coordinator core (R3, R13), used by the other
``test_group_*`` modules: it runs a ``GroupShard`` exactly as the service does — append the
records of a ``Result`` as one real record batch to an in-memory log, replay them, deliver the
outbox — and can rebuild a fresh shard from that log through the loader (replay = live).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from oncelog.coordinator.group.loader import replay_batch
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import (
    GroupSettings,
    JoinRequest,
    JoinResult,
    OffsetCommitData,
    Parked,
    Result,
    SyncResult,
)
from oncelog.protocol import records
from oncelog.types import TopicPartition

START_MS = 1_700_000_000_000
SUB = encode_subscription(["t"])


class Harness:
    def __init__(self, settings: GroupSettings | None = None, partition: int = 0) -> None:
        self.settings = settings or GroupSettings(initial_rebalance_delay_ms=0)
        self._ids = itertools.count(1)
        self.shard = GroupShard(partition, self.settings, new_member_id=self._member_id)
        self.now = START_MS
        self.log: list[bytes] = []  # record batches with their final offsets
        self.next_offset = 0
        self.answers: dict[int, object] = {}

    def _member_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    # -- the service's write path, in memory ---------------------------------------------------

    def _append(self, batch: bytes) -> int:
        h = records.parse_header(batch)
        base = self.next_offset
        self.log.append(records.with_base_offset(batch, base))
        self.next_offset = base + h.last_offset_delta + 1
        return base

    def run(self, result: Result) -> Any:
        if result.records:
            pid, epoch = result.producer or (-1, -1)
            batch = records.build_batch(
                [(rec.encode_key(k), rec.encode_value(v), ()) for k, v in result.records],
                timestamp_ms=self.now, producer_id=pid, producer_epoch=epoch, transactional=result.producer is not None,
            )
            base = self._append(batch)
            for i, (k, v) in enumerate(result.records):
                self.shard.replay(k, v, record_offset=base + i, now=self.now, producer_id=pid, producer_epoch=epoch,
                                  transactional=result.producer is not None)
        for reply_id, payload in self.shard.outbox:
            assert reply_id not in self.answers, f"reply {reply_id} answered twice"
            self.answers[reply_id] = payload
        self.shard.outbox.clear()
        return result.response

    def marker(self, producer_id: int, epoch: int, commit: bool) -> None:
        """What the transaction coordinator does: append a marker, then complete_transaction."""
        self._append(records.build_control_batch(commit=commit, producer_id=producer_id, producer_epoch=epoch,
                                                 coordinator_epoch=0, timestamp_ms=self.now))
        self.shard.replay_marker(producer_id, epoch, commit)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.shard.tick(self.now))

    def reloaded(self) -> GroupShard:
        """A fresh shard loaded from the log (what a restarted coordinator would have)."""
        fresh = GroupShard(self.shard.partition, self.settings)
        for batch in self.log:
            replay_batch(fresh, records.parse_header(batch), batch, self.now)
        return fresh

    def answer(self, parked: Any) -> Any:
        """The delivered answer of a parked request (None while still parked)."""
        assert isinstance(parked, Parked), parked
        return self.answers.get(parked.reply_id)

    # -- requests ----------------------------------------------------------------------------------

    def join(self, group: str = "g", member_id: str = "", *, instance: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] = (("range", SUB),), session: int = 10_000,
             rebalance: int = 10_000, v4: bool = False, client: str = "c", protocol_type: str = "consumer") -> Any:
        req = JoinRequest(group, member_id, instance, protocol_type, protocols, session, rebalance, client, "/127.0.0.1",
                          require_known_member_id=v4 and instance is None)
        return self.run(self.shard.join_group(req, self.now))

    def join_now(self, group: str = "g", member_id: str = "", **kw: Any) -> JoinResult:
        """Join and expect the answer at once (the join phase ends with this request)."""
        out = self.join(group, member_id, **kw)
        res = self.answer(out) if isinstance(out, Parked) else out
        assert isinstance(res, JoinResult), res
        return res

    def sync(self, group: str, res: JoinResult, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> Any:
        return self.run(self.shard.sync_group(group, res.generation, res.member_id, instance, "consumer",
                                              res.protocol_name, assignments or {}, self.now))

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> None:
        self.shard.heartbeat(group, generation, member_id, instance, self.now)

    def commit(self, group: str, offsets: dict[TopicPartition, int], *, generation: int = -1, member_id: str = "",
               instance: str | None = None, expire: int = -1) -> dict:
        data = {tp: OffsetCommitData(o, 3, f"m{o}") for tp, o in offsets.items()}
        return self.run(self.shard.commit_offsets(group, generation, member_id, instance, data, self.now,
                                                  expire_timestamp=expire))

    def txn_commit(self, group: str, pid: int, epoch: int, offsets: dict[TopicPartition, int], *,
                   generation: int = -1, member_id: str = "") -> dict:
        data = {tp: OffsetCommitData(o) for tp, o in offsets.items()}
        return self.run(self.shard.txn_commit_offsets(group, pid, epoch, generation, member_id, None, data, self.now))

    def fetch(self, group: str, *tps: TopicPartition, stable: bool = False) -> dict:
        rows = self.shard.fetch_offsets(group, list(tps) if tps else None, stable)
        return {tp: (e if e is not None else (o.offset if o is not None else None)) for tp, o, e in rows}

    def stable_group(self, group: str = "g", n: int = 1) -> list[JoinResult]:
        """A Stable group of ``n`` members with the leader's assignment stored."""
        first = self.join_now(group, client="m0")
        self.sync(group, first, {first.member_id: encode_assignment({"t": [0]})})
        if n == 1:
            return [first]
        parked = [self.join(group, client=f"m{i}") for i in range(1, n)]
        rejoin = self.join(group, first.member_id)
        results = [self.answer(p) for p in [rejoin, *parked]]
        assert all(isinstance(r, JoinResult) for r in results), results
        leader = next(r for r in results if r.members)
        syncs = {r.member_id: self.sync(group, r, {m: encode_assignment({"t": [i]}) for i, (m, _, _) in enumerate(leader.members)} if r is leader else None) for r in results if r is not leader}
        syncs[leader.member_id] = self.sync(group, leader, {m: encode_assignment({"t": [i]}) for i, (m, _, _) in enumerate(leader.members)})
        for out in syncs.values():
            got = self.answer(out) if isinstance(out, Parked) else out
            assert isinstance(got, SyncResult), got
        return results


TP0 = TopicPartition("t", 0)


def test_harness_replays_what_it_appends() -> None:
    h = Harness()
    h.commit("g", {TP0: 5})
    assert h.fetch("g", TP0) == {TP0: 5}
    assert h.reloaded().offsets.committed == h.shard.offsets.committed


def test_harness_builds_a_stable_group_of_three() -> None:
    h = Harness()
    members = h.stable_group("g", 3)
    group = h.shard.groups["g"]
    assert group.state.value == "Stable" and len(group.members) == 3
    assert {m.member_id for m in members} == set(group.members)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
