"""The database outbox's drain (issue 31, docs/DATABASE.md): move the committed rows of
``oncelog.outbox`` into the logs of the partitions this broker leads (its statements:
cluster/outbox.py).

Theory of operation. ``oncelog.send`` (cluster/outbox_schema.py) inserts a pending row in the
application's transaction and sends ``NOTIFY oncelog_outbox, '<partition id>'``, which
PostgreSQL delivers only when that transaction commits. A listener thread (its own connection)
hears it and wakes the drain of that partition on the event loop, if this broker leads it. A
poll (every ``poll_s``) wakes every led partition that has pending rows, so a notification lost
while the listener reconnected delays records by at most about ``poll_s``.

One drain per partition at a time, each round:

1. read the oldest committed pending rows of the partition, in id order (the order of the
   ``send`` calls within a transaction), at most ``max_records`` and at most the topic's
   ``max.message.bytes`` as one batch (at least one row: ``send`` refused larger records);
2. build one v2 record batch of them: the broker's own producer id (taken from the store's
   producer id blocks, never given to anyone else), epoch 0, the next sequence of that producer
   on this partition (from the partition's producer state, so a duplicate is impossible and
   would be answered, not written), each record's timestamp the time of its ``send``;
3. append it through the produce path (``Partition.append_outbox``: producer state
   check, the engine's commit, producer state update after COMMIT), the rows' ids riding along:
   the engine deletes exactly those rows in the transaction that commits the batch, or writes
   nothing — the PostgreSQL engine's group commit (``oncelog_append``) and, for a diskless
   topic, the object writer's commit of the batch's coordinates (``oncelog_dl_commit``): every
   engine with an ``outbox_id`` is drained alike.

So a pending row becomes a record iff it is deleted, in one store transaction: a broker killed
at any point leaves either both or neither, and the next leader drains what is left. Only the
partition's leader drains it (the append is conditional on its leader epoch), and it never
reads a row again before the append holding it has committed (one drain at a time), so no row
is appended twice. Rows of a partition that no longer exists (its topic was deleted before they
were drained) are deleted by the poll now and then.

Single-threaded: the event loop, except the listener thread, which only hops to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from oncelog.broker.partitions.partition import Partition
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.cluster import outbox as store_outbox
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.notify import ChannelListener
from oncelog.cluster.outbox_schema import BATCH_OVERHEAD, OUTBOX_CHANNEL
from oncelog.clock import Clock
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError
from oncelog.storage.producer_state import INT32_MAX, next_sequence

__all__ = ["OutboxDrainer"]

log = logging.getLogger(__name__)

#: records per batch (and per drain transaction) at most
MAX_RECORDS = 500
#: how often led partitions are checked for pending rows (bounds the delay of a lost NOTIFY)
POLL_S = 1.0
#: every this many polls, rows of partitions that no longer exist are deleted
ORPHAN_EVERY = 60
#: one warning per partition per this many seconds at most
WARN_EVERY_S = 10.0

class OutboxDrainer:
    def __init__(self, replicas: ReplicaManager, reader: StoreConnection, connect: Callable[[], Any],
                 next_producer_id: Callable[[], int], clock: Clock, node_id: int, *, poll_s: float = POLL_S,
                 max_records: int = MAX_RECORDS) -> None:
        """``reader``: the event loop's store connection; ``connect``: a new autocommit psycopg
        connection (the listener's)."""
        self._replicas = replicas
        self._reader = reader
        self._next_producer_id = next_producer_id
        self._clock = clock
        self._node = node_id
        self._poll_s = poll_s
        self._max_records = max_records
        self._pid: int | None = None
        self._running: set[int] = set()
        self._again: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned: dict[int, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: asyncio.Task[None] | None = None
        self._listener = ChannelListener(connect, OUTBOX_CHANNEL, self._notified, f"oncelog-outbox-listen-{node_id}",
                                         "outbox notifications")
        self.drained_records = 0  # since start (tests, logs)
        self._started = False

    def start(self) -> bool:
        """Start listening and polling; False (and nothing started) when the store has no
        outbox (its role could not create the schema ``oncelog``: schema.ensure_schema)."""
        if not store_outbox.available(self._reader):
            log.warning("node %d: no database outbox in the store (schema oncelog): not draining", self._node)
            return False
        self._loop = asyncio.get_running_loop()
        self._listener.start()
        self._poller = self._loop.create_task(self._poll_forever(), name="outbox poll")
        self._started = True
        return True

    async def stop(self) -> None:
        """Stop waking drains; wait for the ones running (each ends after its append)."""
        if not self._started:
            return
        await asyncio.to_thread(self._listener.close)
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        self._running.clear()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=30)

    # -- waking ---------------------------------------------------------------------------------

    def _notified(self, payload: str) -> None:
        """On the listener thread."""
        try:
            pid = int(payload)
        except ValueError:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake, pid)

    def _led(self) -> dict[int, Partition]:
        return {oid: p for p in self._replicas.partitions.values() if (oid := p.log.outbox_id) is not None}

    def wake(self, partition_id: int) -> None:
        """Drain ``partition_id`` now if this broker leads it (once more after the running drain)."""
        if partition_id in self._running:
            self._again.add(partition_id)
            return
        if partition_id not in self._led():
            return
        self._running.add(partition_id)
        task = asyncio.get_running_loop().create_task(self._drain(partition_id), name=f"outbox drain {partition_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _poll_forever(self) -> None:
        polls = 0
        while True:
            await asyncio.sleep(self._poll_s)
            polls += 1
            try:
                led = list(self._led())
                if led:
                    for pid in store_outbox.partitions_with_rows(self._reader, led):
                        self.wake(pid)
                if polls % ORPHAN_EVERY == 0:
                    n = store_outbox.delete_orphans(self._reader)
                    if n:
                        log.info("node %d: dropped %d outbox row(s) of deleted partitions", self._node, n)
            except KafkaError as exc:  # StoreUnavailable: the next poll tries again
                log.info("node %d: outbox poll failed: %s", self._node, exc)

    # -- draining -------------------------------------------------------------------------------

    async def _drain(self, partition_id: int) -> None:
        try:
            while True:
                part = self._led().get(partition_id)
                if part is None:
                    return
                self._again.discard(partition_id)
                n = await self._drain_once(part)
                if n == 0 and partition_id not in self._again:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # KafkaError (fenced, store down) or a bug: the next poll retries
            now = time.monotonic()
            if now - self._warned.get(partition_id, -WARN_EVERY_S) >= WARN_EVERY_S:
                self._warned[partition_id] = now
                log.warning("node %d: draining the outbox of partition id %d failed (retried at the next poll): %s",
                            self._node, partition_id, exc, exc_info=not isinstance(exc, KafkaError))
        finally:
            self._running.discard(partition_id)

    async def _drain_once(self, part: Partition) -> int:
        """One batch of ``part``'s pending rows appended (and deleted); how many records."""
        outbox_id = part.log.outbox_id
        if outbox_id is None:
            return 0
        max_bytes = max(1, part.config.max_message_bytes - BATCH_OVERHEAD)
        rows = store_outbox.rows(self._reader, outbox_id, self._max_records, max_bytes)
        if not rows:
            return 0
        recs = [(None if k is None else bytes(k), None if v is None else bytes(v),
                 [(h[0], None if h[1] is None else h[1].encode("utf-8")) for h in headers], ts)
                for _id, ts, k, v, headers in rows]
        pid, seq = self._sequence(part, len(recs))
        batch = records.build_batch(recs, timestamp_ms=recs[0][3], producer_id=pid, producer_epoch=0,
                                    base_sequence=seq)
        header = records.parse_header(batch)
        await part.append_outbox(batch, header, self._clock.now_ms(), tuple(r[0] for r in rows))
        self.drained_records += len(recs)
        return len(recs)

    def _sequence(self, part: Partition, count: int) -> tuple[int, int]:
        """The broker's outbox producer id and the next sequence of its on ``part`` (a new
        producer id rather than a batch wrapping past 2^31-1)."""
        if self._pid is None:
            self._pid = self._next_producer_id()
        entry = part.producers.entries.get(self._pid)
        seq = 0 if entry is None or entry.last_seq < 0 else next_sequence(entry.last_seq)
        if seq + count - 1 > INT32_MAX:
            self._pid = self._next_producer_id()
            seq = 0
        return self._pid, seq
