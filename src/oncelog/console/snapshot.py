"""What the web console shows, as plain JSON-able dicts (issue 19 section 3, docs/CONSOLE.md).

Two steps, so the part that touches broker state is as short as possible:

* ``observe.take(broker)`` (broker/observability/observe.py, the snapshot /metrics reads too) runs ON THE
  EVENT LOOP, which owns every piece of broker state: it copies what the console shows into
  plain values (``BrokerState``): partitions with their offsets and open transactions, groups
  with their members and committed offsets, the transaction coordinator's transactional ids,
  the brokers, a bounded number of rows per turn of the loop. No I/O.
* ``state(raw, hanging, now_ms)`` here is pure: it derives lag, ages, totals per topic and the
  hanging marks, and returns the dict ``/api/state`` answers. It is tested without a broker.

In cluster mode a broker knows the partitions it leads, the groups and transactional ids its
coordinator partitions hold, and the cluster's live brokers (its latest ``ClusterView``); the
console shows exactly that and says so (``mode``). A committed offset of a partition led by
another broker has no lag here (``None``), rather than a guess.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.observability.observe import OPEN_TXN_STATES, BrokerState, lag
from oncelog.coordinator.group.consumer_protocol import assigned_partitions

__all__ = ["OPEN_TXN_STATES", "state"]


def _empty_group(gid: str, gtype: str) -> dict[str, Any]:
    """A group known by its committed offsets or share partitions alone (no members loaded)."""
    return {"group_id": gid, "type": gtype, "state": "Empty", "protocol_type": "share" if gtype == "share" else "",
            "protocol": "", "generation": 0, "members": [], "offsets": [], "lag": 0,
            **({"share_partitions": []} if gtype == "share" else {})}


def state(raw: BrokerState, hanging: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """The ``/api/state`` document (pure). ``hanging``: what ``Hanging.check`` last found
    (``{"checked_ms", "error", "items": [Hanging.to_json() …]}``)."""
    partitions = []
    topics: dict[str, dict[str, Any]] = {}
    ends: dict[tuple[str, int], int] = {}
    for row in sorted(raw.partitions, key=lambda r: (r.topic, r.partition)):
        topic, p, start, lso, end = row.topic, row.partition, row.log_start, row.lso, row.log_end
        size, segments, open_txns = row.size_bytes, row.segments, row.open_txns
        ends[(topic, p)] = end
        partitions.append({"topic": topic, "partition": p, "log_start": start, "lso": lso, "log_end": end,
                           "lso_lag": lag(end, lso), "records": lag(end, start), "size_bytes": size,
                           "segments": segments, "open_transactions": open_txns})
        t = topics.setdefault(topic, {"name": topic, "internal": topic.startswith("__"), "partitions": 0,
                                      "records": 0, "size_bytes": 0, "lso_lag": 0, "open_transactions": 0,
                                      "groups": {}})
        t["partitions"] += 1
        t["records"] += lag(end, start)
        t["size_bytes"] = -1 if size < 0 or t["size_bytes"] < 0 else t["size_bytes"] + size
        t["lso_lag"] += lag(end, lso)
        t["open_transactions"] += open_txns

    owners: dict[tuple[str, str, int], str] = {}
    groups: dict[str, dict[str, Any]] = {}
    for row in sorted(raw.groups, key=lambda g: g.group_id):
        gid, gstate, ptype, protocol, generation = row.group_id, row.state, row.protocol_type, row.protocol, row.generation
        members = row.members
        mlist = []
        for i, (member_id, instance_id, client_id, client_host, assignment) in enumerate(members):
            if row.assigned is not None:  # a consumer or share group: the coordinator's assignment
                parts: dict[str, list[int]] | None = {}
                for tp in row.assigned[i]:
                    parts.setdefault(tp.topic, []).append(tp.partition)  # type: ignore[union-attr]
            else:
                parts = assigned_partitions(assignment) if ptype == "consumer" and assignment else None
            names = sorted(f"{t}-{p}" for t, ps in (parts or {}).items() for p in ps)
            if row.group_type != "share":  # a share partition is shared: no one member owns it
                for t, ps in (parts or {}).items():
                    for p in ps:
                        owners[(gid, t, p)] = member_id
            mlist.append({"member_id": member_id, "instance_id": instance_id, "client_id": client_id,
                          "client_host": client_host, "assignment": names})
        groups[gid] = {"group_id": gid, "type": row.group_type, "state": gstate, "protocol_type": ptype,
                       "protocol": protocol, "generation": generation, "members": mlist, "offsets": [], "lag": 0}
        if row.group_type == "share":
            groups[gid]["share_partitions"] = []
    for sp in sorted(raw.share_partitions):
        g = groups.setdefault(sp.group_id, _empty_group(sp.group_id, "share"))
        end = ends.get((sp.topic, sp.partition))
        g.setdefault("share_partitions", []).append({
            "topic": sp.topic, "partition": sp.partition, "start_offset": sp.start_offset,
            "end_offset": sp.end_offset, "in_flight": sp.in_flight, "acquired": sp.acquired,
            "acknowledged": sp.acknowledged_total, "archived": sp.archived_total, "log_end": end,
            # records not yet done: those from the SPSO to the log end (None: led elsewhere)
            "lag": None if end is None or sp.start_offset < 0 else lag(end, sp.start_offset)})
        g["lag"] += g["share_partitions"][-1]["lag"] or 0
    for gid, topic, p, committed in sorted(raw.committed):
        g = groups.setdefault(gid, _empty_group(gid, "classic"))
        end = ends.get((topic, p))
        behind = None if end is None else lag(end, committed)
        g["offsets"].append({"topic": topic, "partition": p, "committed": committed, "log_end": end, "lag": behind,
                             "member": owners.get((gid, topic, p))})
        if behind is not None:
            g["lag"] += behind
        if topic in topics:  # which groups read each topic, and how far behind (AKHQ's topic list has it)
            per = topics[topic].setdefault("groups", {})
            per[gid] = per.get(gid, 0) + (behind or 0)
    for t in topics.values():
        t["groups"] = [{"group_id": g, "lag": n} for g, n in sorted(t.get("groups", {}).items())]

    hanging_items = list(hanging.get("items", ()))
    hanging_ids = {h.get("transactional_id") for h in hanging_items if h.get("transactional_id")}
    txns = []
    for t in sorted(raw.txns, key=lambda t: t.transactional_id):
        tid, tstate, pid, epoch, timeout_ms, start_ms = (t.transactional_id, t.state, t.producer_id,
                                                         t.producer_epoch, t.timeout_ms, t.start_ms)
        tps = sorted(t.partitions)
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
                   "groups_loading": raw.groups_loading, "snapshot_ms": round(raw.loop_s * 1000, 3)},
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r, "this": n == raw.node_id}
                    for n, h, p, r in sorted(raw.brokers)],
        "topics": sorted(topics.values(), key=lambda t: (t["internal"], t["name"])),
        "partitions": partitions,
        "groups": sorted(groups.values(), key=lambda g: g["group_id"]),
        "transactions": txns,
        "hanging": {"checked_ms": hanging.get("checked_ms"), "error": hanging.get("error"), "items": hanging_items},
        # cluster mode: who leads every partition (this broker's view), and the object store's
        # counters of the diskless topics this broker serves (None: no object store)
        "leaders": [{"topic": t, "partition": p, "leader": n, "leader_epoch": e, "diskless": d,
                     "internal": t.startswith("__")} for t, p, n, e, d in sorted(raw.leaders)],
        "diskless": raw.diskless,
    }
