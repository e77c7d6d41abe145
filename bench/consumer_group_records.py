"""``python -m bench.consumer_group_records [members] [partitions]``: the coordinator-side cost of
durable consumer groups (issue 30), in process (no broker, no I/O): a ``GroupShard`` of one group
of ``members`` consumers on a topic of ``partitions`` partitions. Reported: the time for every
member to join (each join a new target assignment: the whole group's records are compared), the
time per steady heartbeat (nothing changes: no record), the records and their encoded bytes.
Run it with ``PYTHONPATH`` at another checkout's ``src`` to compare (the code before issue 30
wrote no records: its Result carries none).
"""

from __future__ import annotations

import sys
import time
import uuid

from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.shard import GroupShard


def _hb(member: str, epoch: int, owned: cg.Assignment | None) -> cg.HeartbeatRequest:
    return cg.HeartbeatRequest(group_id="g", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
                               rebalance_timeout_ms=30_000, subscribed_names=("t",), subscribed_regex=None,
                               server_assignor=None, owned={} if epoch == 0 else owned)


def main() -> None:
    members = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    partitions = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    shard = GroupShard(0)
    topics = {"t": (uuid.UUID(int=1), partitions)}
    n_records = n_bytes = 0

    def apply(result) -> None:  # type: ignore[no-untyped-def]
        nonlocal n_records, n_bytes
        for key, value in result.records:
            n_records += 1
            data = rec.encode_value(value)
            n_bytes += len(rec.encode_key(key)) + (len(data) if data else 0)
            shard.replay(key, value, record_offset=n_records, now=0)

    start = time.perf_counter()
    for i in range(members):
        apply(shard.consumer_heartbeat(_hb(f"m{i}", 0, {}), topics, 0))
    join_s = time.perf_counter() - start
    joined = (n_records, n_bytes)
    # every member reconciles (acknowledges revocations, takes its partitions) until stable
    for _ in range(4):
        for mid, m in list(shard.consumers.groups["g"].members.items()):
            apply(shard.consumer_heartbeat(_hb(mid, m.member_epoch, dict(m.assigned)), topics, 0))
    group = shard.consumers.groups["g"]
    beats = 5_000
    ids = list(group.members)
    start = time.perf_counter()
    for i in range(beats):
        m = group.members[ids[i % len(ids)]]
        apply(shard.consumer_heartbeat(_hb(m.member_id, m.member_epoch, dict(m.assigned)), topics, 0))
    beat_us = (time.perf_counter() - start) / beats * 1e6
    print(f"{members} members, {partitions} partitions, state {group.state}: joins {join_s * 1000:.0f} ms "
          f"({joined[0]} records, {joined[1]} bytes); steady heartbeat {beat_us:.1f} us; "
          f"records in all {n_records} ({n_bytes} bytes)")


if __name__ == "__main__":
    main()
