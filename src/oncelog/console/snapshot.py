"""What the web console shows, as plain JSON-able dicts (issue 19 section 3, docs/CONSOLE.md).

Two steps, so the part that touches broker state is as short as possible:

* ``take(broker)`` runs ON THE EVENT LOOP (the loop owns every piece of broker state; no other
  code runs while it does): it copies what the console shows into plain values (``Raw``):
  partitions with their offsets and open transactions, groups with their members and committed
  offsets, the transaction coordinator's transactional ids, the brokers. No I/O, no waiting.
* ``state(raw, hanging, now_ms)`` is pure: it derives lag, ages, totals per topic and the
  hanging marks, and returns the dict ``/api/state`` answers. It is tested without a broker.

In cluster mode a broker knows the partitions it leads, the groups and transactional ids its
coordinator partitions hold, and the cluster's live brokers (its latest ``ClusterView``); the
console shows exactly that and says so (``mode``). A committed offset of a partition led by
another broker has no lag here (``None``), rather than a guess.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.coordinator.group.consumer_protocol import assigned_partitions

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

#: the transaction states in which a transactional id has an open transaction
OPEN_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@dataclass(slots=True)
class Raw:
    """Broker state at one instant, as plain values (built on the event loop by ``take``)."""

    now_ms: int = 0
    node_id: int = 0
    cluster_id: str = ""
    mode: str = "embedded"
    #: (node id, host, port, rack or None)
    brokers: list[tuple[int, str, int, str | None]] = field(default_factory=list)
    #: (listener name, security protocol, bound host, bound port)
    listeners: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: (topic, partition, log start, LSO, log end, size bytes or -1, segments or -1, open txns)
    partitions: list[tuple[str, int, int, int, int, int, int, int]] = field(default_factory=list)
    #: group id -> (state, protocol type, protocol, generation,
    #:              [(member id, instance id, client id, client host, assignment bytes)])
    groups: dict[str, tuple[str, str, str, int, list[tuple[str, str | None, str, str, bytes]]]] = \
        field(default_factory=dict)
    #: (group, topic, partition, committed offset)
    committed: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: (transactional id, state, producer id, epoch, timeout ms, start ms, [(topic, partition)])
    txns: list[tuple[str, str, int, int, int, int, list[tuple[str, int]]]] = field(default_factory=list)
    loading: bool = False
    #: how long ``take`` held the event loop (milliseconds)
    took_ms: float = 0.0


def take(broker: "Broker") -> Raw:
    """Copy the console's view of ``broker``. Must run on the broker's event loop. A part not
    started yet (the transaction coordinator during start-up) is left out."""
    started = time.perf_counter()
    raw = Raw(now_ms=broker.clock.now_ms(), node_id=broker.node_id, cluster_id=broker.cluster_id)
    for lst, host, port in broker.bound_listeners():
        raw.listeners.append((lst.name, lst.protocol, host, port))
    member = broker.cluster
    if member is not None:
        raw.mode = "cluster"
        view = getattr(member, "view", None)
        for b in (view.brokers if view is not None else ()):
            raw.brokers.append((b.node_id, b.host, b.port, b.rack))
    else:
        raw.brokers.append((broker.node_id, broker.advertised_host, broker.advertised_port, None))
    for tp, part in list(broker.replicas.partitions.items()):
        size, segments = part.disk_usage()
        raw.partitions.append((tp.topic, tp.partition, part.log_start_offset, part.last_stable_offset,
                               part.high_watermark, size, segments, len(part.producers.ongoing)))
    for shard in list(broker.groups.shards.values()):
        for gid, g in list(shard.groups.items()):
            if g.state.value == "Dead":
                continue
            members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)
                       for m in g.members.values()]
            raw.groups[gid] = (g.state.value, g.protocol_type or "", g.protocol_name or "", g.generation, members)
        for gid, offsets in list(shard.offsets.committed.items()):
            for tp, off in list(offsets.items()):
                raw.committed.append((gid, tp.topic, tp.partition, off.offset))
    raw.loading = bool(broker.groups.loading)
    txns = getattr(broker, "transactions", None)
    if txns is not None:
        for tid, meta in list(txns.txns.items()):
            raw.txns.append((tid, meta.state.kafka_name, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
                             meta.start_ms, sorted((tp.topic, tp.partition) for tp in meta.partitions)))
    raw.took_ms = (time.perf_counter() - started) * 1000
    return raw


def _lag(end: int, position: int) -> int:
    return max(end - position, 0)


def state(raw: Raw, hanging: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """The ``/api/state`` document (pure). ``hanging``: what ``Hanging.check`` last found
    (``{"checked_ms", "error", "items": [Hanging.to_json() …]}``)."""
    partitions = []
    topics: dict[str, dict[str, Any]] = {}
    ends: dict[tuple[str, int], int] = {}
    for topic, p, start, lso, end, size, segments, open_txns in sorted(raw.partitions):
        ends[(topic, p)] = end
        partitions.append({"topic": topic, "partition": p, "log_start": start, "lso": lso, "log_end": end,
                           "lso_lag": _lag(end, lso), "records": _lag(end, start), "size_bytes": size,
                           "segments": segments, "open_transactions": open_txns})
        t = topics.setdefault(topic, {"name": topic, "internal": topic.startswith("__"), "partitions": 0,
                                      "records": 0, "size_bytes": 0, "lso_lag": 0, "open_transactions": 0,
                                      "groups": {}})
        t["partitions"] += 1
        t["records"] += _lag(end, start)
        t["size_bytes"] = -1 if size < 0 or t["size_bytes"] < 0 else t["size_bytes"] + size
        t["lso_lag"] += _lag(end, lso)
        t["open_transactions"] += open_txns

    owners: dict[tuple[str, str, int], str] = {}
    groups: dict[str, dict[str, Any]] = {}
    for gid, (gstate, ptype, protocol, generation, members) in sorted(raw.groups.items()):
        mlist = []
        for member_id, instance_id, client_id, client_host, assignment in members:
            parts = assigned_partitions(assignment) if ptype == "consumer" and assignment else None
            names = sorted(f"{t}-{p}" for t, ps in (parts or {}).items() for p in ps)
            for t, ps in (parts or {}).items():
                for p in ps:
                    owners[(gid, t, p)] = member_id
            mlist.append({"member_id": member_id, "instance_id": instance_id, "client_id": client_id,
                          "client_host": client_host, "assignment": names})
        groups[gid] = {"group_id": gid, "state": gstate, "protocol_type": ptype, "protocol": protocol,
                       "generation": generation, "members": mlist, "offsets": [], "lag": 0}
    for gid, topic, p, committed in sorted(raw.committed):
        g = groups.setdefault(gid, {"group_id": gid, "state": "Empty", "protocol_type": "", "protocol": "",
                                    "generation": 0, "members": [], "offsets": [], "lag": 0})
        end = ends.get((topic, p))
        lag = None if end is None else _lag(end, committed)
        g["offsets"].append({"topic": topic, "partition": p, "committed": committed, "log_end": end, "lag": lag,
                             "member": owners.get((gid, topic, p))})
        if lag is not None:
            g["lag"] += lag
        if topic in topics:  # which groups read each topic, and how far behind (AKHQ's topic list has it)
            per = topics[topic].setdefault("groups", {})
            per[gid] = per.get(gid, 0) + (lag or 0)
    for t in topics.values():
        t["groups"] = [{"group_id": g, "lag": n} for g, n in sorted(t.get("groups", {}).items())]

    hanging_items = list(hanging.get("items", ()))
    hanging_ids = {h.get("transactional_id") for h in hanging_items if h.get("transactional_id")}
    txns = []
    for tid, tstate, pid, epoch, timeout_ms, start_ms, tps in sorted(raw.txns):
        is_open = tstate in OPEN_TXN_STATES
        age = now_ms - start_ms if is_open and start_ms > 0 else None
        txns.append({"transactional_id": tid, "state": tstate, "open": is_open, "producer_id": pid,
                     "producer_epoch": epoch, "timeout_ms": timeout_ms, "start_ms": start_ms if start_ms > 0 else None,
                     "age_ms": age, "partitions": [f"{t}-{p}" for t, p in tps],
                     "over_timeout": age is not None and age > timeout_ms, "hanging": tid in hanging_ids})
    txns.sort(key=lambda x: (not x["hanging"], not x["open"], -(x["age_ms"] or 0), x["transactional_id"]))
    return {
        "now_ms": now_ms,
        "broker": {"node_id": raw.node_id, "cluster_id": raw.cluster_id, "mode": raw.mode,
                   "listeners": [{"name": n, "protocol": pr, "host": h, "port": po} for n, pr, h, po in raw.listeners],
                   "groups_loading": raw.loading, "snapshot_ms": round(raw.took_ms, 3)},
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r, "this": n == raw.node_id}
                    for n, h, p, r in sorted(raw.brokers)],
        "topics": sorted(topics.values(), key=lambda t: (t["internal"], t["name"])),
        "partitions": partitions,
        "groups": sorted(groups.values(), key=lambda g: g["group_id"]),
        "transactions": txns,
        "hanging": {"checked_ms": hanging.get("checked_ms"), "error": hanging.get("error"), "items": hanging_items},
    }
