"""A partition's transaction timeline (docs/CONSOLE.md, "Transaction timeline"): its
transactions as ranges of offsets, each with its producer, transactional id and how it ended,
along the log start, the LSO and the log end. Pure over a ``PartitionReader`` (messages.py).

How a range is found: the batch headers of a window of the log are walked (no record is
decoded; a control batch's one marker record is). A transactional batch opens its producer's
range (first offset) or extends it; that producer's next COMMIT or ABORT marker closes it
(``committed``/``aborted``, ``marker`` its offset). A range still unclosed at the end of the
window is ``open`` when the leader has the producer's transaction open (its first offset is the
leader's, so a range that began before the window starts where it began), else it ended past
the window (``committed``, or ``aborted`` when the aborted index says so). Non-transactional
batches are ``plain`` ranges, consecutive ones merged. A marker whose transaction began before
the window gives a range from the window's start, marked ``clipped``.

The window: by default it ends at the log end and starts ``SPAN`` offsets before it, or at the
LSO when that is earlier (so the oldest open transaction is in it), never before the log
start; ``offset=O`` starts it at O. It reads at most ``MAX_BYTES`` of batches (in hops of
``messages.HOP_BYTES``); a window cut short says where it stopped (``end``). At most
``MAX_RANGES`` ranges are kept (the newest) and ``MAX_LANES`` producers get a lane of their own.
"""

from __future__ import annotations

from typing import Any

from oncelog.console.browse import walk
from oncelog.console.messages import HOP_BYTES, PartitionReader
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError

__all__ = ["timeline"]

SPAN = 10_000
MAX_BYTES = 4 << 20
MAX_RANGES = 2000
MAX_LANES = 40


def timeline(reader: PartitionReader, topic: str, partition: int, offset: int | None = None) -> dict[str, Any]:
    """The timeline document of one partition (see the module docstring)."""
    bounds = reader.window(2**63 - 1, 0, False)
    start_default = max(bounds.log_start, min(bounds.lso, bounds.high_watermark - SPAN))
    start = start_default if offset is None else max(bounds.log_start, min(offset, bounds.high_watermark))
    ranges: list[dict[str, Any]] = []
    open_by_pid: dict[int, dict[str, Any]] = {}
    plain: dict[str, Any] | None = None
    pos, nbytes, first_seen = start, 0, None
    facts = None
    w = bounds
    while nbytes < MAX_BYTES:
        w = reader.window(pos, HOP_BYTES, False)
        batches = walk(w.data)
        if pos >= w.upper or not batches:
            break
        facts = reader.facts(batches[0][1].base_offset, batches[-1][1].last_offset,
                             frozenset(h.producer_id for _, h in batches if h.producer_id >= 0))
        mv = memoryview(w.data)
        for at, h in batches:
            if h.last_offset < pos:
                continue
            first_seen = h.base_offset if first_seen is None else first_seen
            if h.is_control:
                plain = None
                r = open_by_pid.pop(h.producer_id, None)
                if r is None:
                    r = {"first": max(start, h.base_offset), "last": h.base_offset, "producer_id": h.producer_id,
                         "producer_epoch": h.producer_epoch, "clipped": True}
                    for a in facts.aborted:  # an aborted one's first offset is in the index
                        if a.producer_id == h.producer_id and a.last_offset == h.base_offset:
                            r["first"], r["clipped"] = a.first_offset, a.first_offset < start
                try:
                    commit = records.read_control_marker(mv[at:at + h.size]).commit
                except KafkaError:
                    commit = None
                r.update(fate="committed" if commit else "aborted" if commit is False else "unknown",
                         marker=h.base_offset)
                ranges.append(r)
            elif h.is_transactional:
                plain = None
                r = open_by_pid.get(h.producer_id)
                if r is None:
                    open_by_pid[h.producer_id] = {"first": h.base_offset, "last": h.last_offset,
                                                  "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                                                  "clipped": False}
                else:
                    r["last"] = h.last_offset
            elif plain is not None and plain["last"] + 1 >= h.base_offset:
                plain["last"] = h.last_offset
            else:
                plain = {"first": h.base_offset, "last": h.last_offset, "fate": "plain",
                         "producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "clipped": False}
                ranges.append(plain)
            nbytes += h.size
            pos = h.next_offset
        if len(ranges) > 4 * MAX_RANGES:
            del ranges[:-MAX_RANGES]
    end = pos
    names: dict[int, tuple[str, int]] = {}
    if True:  # the facts as of the end of the walk: the open transactions, the ids to name
        facts = reader.facts(start, max(start, end - 1), frozenset(
            {r["producer_id"] for r in ranges if r["fate"] != "plain"} | set(open_by_pid)))
        names = facts.transactional_ids
        for pid, r in open_by_pid.items():
            if pid in facts.open:
                r.update(fate="open", first=facts.open[pid], clipped=facts.open[pid] < start)
            elif any(a.producer_id == pid and a.first_offset <= r["first"] <= a.last_offset for a in facts.aborted):
                r["fate"] = "aborted"
            else:
                r["fate"] = "committed"  # its marker is past the end of the window
            r["marker"] = None
            ranges.append(r)
    ranges = sorted(ranges, key=lambda r: (r["first"], r["last"]))[-MAX_RANGES:]
    lanes: list[int] = []
    for r in ranges:
        if r["fate"] != "plain" and r["producer_id"] not in lanes and len(lanes) < MAX_LANES:
            lanes.append(r["producer_id"])
        named = names.get(r["producer_id"]) if r["fate"] != "plain" else None
        r["transactional_id"] = named[0] if named is not None else None
    return {"topic": topic, "partition": partition, "log_start": w.log_start, "lso": w.lso,
            "high_watermark": w.high_watermark, "start": start, "end": end, "complete": end >= w.high_watermark,
            "ranges": ranges, "lanes": [{"producer_id": pid, "transactional_id": (names.get(pid) or (None,))[0]}
                                        for pid in lanes],
            "open": [{"producer_id": pid, "first": first, "transactional_id": (names.get(pid) or (None,))[0]}
                     for pid, first in sorted((facts.open if facts is not None else {}).items(),
                                              key=lambda x: x[1])]}
