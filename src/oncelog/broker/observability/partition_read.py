"""One partition's batches and transaction facts, read on the event loop for the web console's
message browser and transaction timeline (docs/CONSOLE.md).

The console reads records as the broker's own Fetch does: ``Partition.read`` (whole batches from
the batch holding the offset asked for, up to the high watermark or the last stable offset),
on every storage engine alike (local files, PostgreSQL, diskless: storage/engine.py). What it
adds to a fetch is what a Fetch answer does not carry and the console shows: which transaction
each batch belongs to and how it ended. That comes from the partition leader's own state, read
in the same turn of the loop:

* the aborted-transaction index entries overlapping the offsets read (``AbortedTxnIndex.collect``,
  what a read_committed Fetch answers);
* the open transactions (``ProducerStateManager.ongoing``: producer id -> first offset), whose
  oldest holds the LSO;
* the transactional id of each producer id, as this broker's transaction coordinator knows it
  (in cluster mode only the ids whose coordinator partition it leads).

Bounded: every call reads at most ``max_bytes`` (the first batch comes whole even when larger,
as for a fetch: KIP-74, so at most max.message.bytes), copies file ranges into memory with
``os.pread`` on the loop (a page-cache copy of at most that much), and walks at most
``MAX_TXN_IDS`` transactional ids per turn of the loop. Nothing decodes records here: the
console does that on its own thread (console/browse.py). A diskless partition whose batches are
not in the read cache answers with what is and loads the rest in the background; ``read_window``
then waits (at most ``wait_s``) for it, as a fetch's long poll would.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, NamedTuple

from oncelog.storage.parts import FileSlice
from oncelog.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from oncelog.broker.observability.observed import ObservedBroker
    from oncelog.broker.partitions.partition import Partition

__all__ = ["TxnFacts", "Window", "offset_for_timestamp", "read_window", "txn_facts"]

#: transactional ids looked at per turn of the loop when naming producer ids
MAX_TXN_IDS = 1024
#: how often a diskless read is retried while its batches load into the cache (seconds)
LOAD_POLL_S = 0.05


class Window(NamedTuple):
    """Whole batches of one partition: ``data`` starts with the batch holding ``offset`` (or the
    log start, when ``offset`` is below it) and ends before ``upper`` (the high watermark, or the
    LSO for a read_committed view); empty when nothing is there. The offsets are as of the read."""

    offset: int
    data: bytes
    log_start: int
    high_watermark: int
    lso: int
    upper: int


class TxnFacts(NamedTuple):
    """What the partition leader knows of the transactions of some offsets: the aborted ones
    overlapping them (``AbortedTxn``: producer id, first offset, marker offset), every open one
    (producer id -> first offset), and the transactional ids (with their producer epochs) of the
    producer ids asked about that this broker's coordinator knows."""

    aborted: tuple[AbortedTxn, ...]
    open: dict[int, int]
    transactional_ids: dict[int, tuple[str, int]]
    log_start: int
    high_watermark: int
    lso: int


def _partition(broker: "ObservedBroker", topic: str, partition: int) -> "Partition":
    """The partition as the Fetch path finds it: UnknownTopicOrPartition, or (cluster mode)
    NotLeaderOrFollower when another broker leads it."""
    return broker.replicas.partition(topic, partition)


def _copy(parts: list) -> bytes:
    """The parts of a read as one bytes object (file ranges read with pread)."""
    out = []
    for part in parts:
        if isinstance(part, FileSlice):
            out.append(os.pread(part.fd, part.length, part.position))
        else:
            out.append(bytes(part))
    return b"".join(out)


async def read_window(broker: "ObservedBroker", topic: str, partition: int, offset: int, max_bytes: int, *,
                      read_committed: bool, wait_s: float = 2.0) -> Window:
    """Whole batches from ``offset`` (see ``Window``). Runs on the event loop. Raises the
    partition's KafkaError (unknown, led elsewhere, storage error)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        part = _partition(broker, topic, partition)
        start, hw, lso = part.log_start_offset, part.high_watermark, part.last_stable_offset
        upper = lso if read_committed else hw
        at = min(max(offset, start), upper)
        if at >= upper:
            return Window(at, b"", start, hw, lso, upper)
        res = part.read(at, max_bytes, read_committed=read_committed)
        data = _copy(res.slices)
        if data or loop.time() >= deadline:
            return Window(at, data, start, hw, lso, upper)
        await asyncio.sleep(LOAD_POLL_S)  # a diskless read cache loading the batches


async def txn_facts(broker: "ObservedBroker", topic: str, partition: int, first: int, last: int,
                    producer_ids: frozenset[int]) -> TxnFacts:
    """The transaction facts of offsets ``first..last`` (see ``TxnFacts``). Runs on the loop."""
    part = _partition(broker, topic, partition)
    aborted = tuple(part.aborted.collect(first, last + 1))
    facts_open = dict(part.producers.ongoing)
    start, hw, lso = part.log_start_offset, part.high_watermark, part.last_stable_offset
    wanted = set(producer_ids) | set(facts_open) | {a.producer_id for a in aborted}
    names: dict[int, tuple[str, int]] = {}
    txns = getattr(broker, "transactions", None)  # set once the broker's start() made it
    if txns is not None and wanted:
        for i, (tid, meta) in enumerate(list(txns.txns.items())):
            if i and i % MAX_TXN_IDS == 0:
                await asyncio.sleep(0)
            if meta.producer_id in wanted:
                names[meta.producer_id] = (tid, meta.producer_epoch)
    return TxnFacts(aborted, facts_open, names, start, hw, lso)


async def offset_for_timestamp(broker: "ObservedBroker", topic: str, partition: int, ts_ms: int) -> int:
    """The offset of the first record (or batch, on an engine that answers at batch
    granularity) whose timestamp >= ``ts_ms``, as ListOffsets answers it; the high watermark
    when none is. Runs on the loop."""
    part = _partition(broker, topic, partition)
    found = part.log.offset_for_timestamp(ts_ms)
    hw = part.high_watermark
    return hw if found is None else min(found[0], hw)
