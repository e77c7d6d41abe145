"""The group coordinator's side of the database inbox (issue 31, docs/DATABASE.md): offsets that
applications commit in their own transactions (``oncelog.commit_offsets``, cluster/inbox_schema.py).

Theory of operation. Three jobs, all for the groups of the ``__consumer_offsets`` partitions
this broker coordinates:

1. **Mirror** (fencing). ``oncelog.commit_offsets`` checks the caller's member id and
   generation (classic) or member epoch (KIP-848) against ``oncelog.inbox_group``. After every
   operation that may change a group (``GroupCoordinator._execute``: after the append and
   replay, before any answer goes out), ``mirror`` writes the groups whose snapshot (kind,
   generation, state, members and their epochs) differs from the one last written; after a
   partition is loaded, ``mirror_partition`` rewrites every row of it. So a member learns of a
   new generation (JoinGroup/SyncGroup answers, heartbeat answers) only after the store's
   fencing does. Rows are UPDATEd, never deleted (a group that went away becomes kind 'none');
   applications' transactions read them without locking them, so no write here waits for one.
   Each group is written on its own (a savepoint per group when one write holds several): a
   group the store refuses is logged and tried again at its next change, and never keeps
   another group's row from being written (a member removed elsewhere is fenced at once).
   A group id the store cannot hold as ``text`` or in its btree index (a NUL character, or
   more than ``MAX_GROUP_ID_BYTES``) is refused at the group APIs with INVALID_GROUP_ID before
   any state changes (``check_group_id``, called by the group coordinator); an application
   could not name such a group in ``oncelog.commit_offsets`` anyway. A member id with a NUL is
   mirrored with U+FFFD in its place (``jsonb`` refuses NUL; no application can name it).
2. **Read-through** (OffsetFetch at once). ``overlay`` answers OffsetFetch with the newest
   pending (committed, not yet drained) row of each partition in place of the coordinator's
   offset: every offset write of a group known to use the inbox drains the group's pending rows
   first (``has_pending``, then ``drain_locked`` under the shard's lock), so a pending row is
   newer than the log. A group becomes known by its first commit's NOTIFY (or the poll), and
   stays known across coordinators (``uses_inbox`` in its mirror row, set at its first drain):
   only a group's very first database commit and a Kafka commit of the same group arriving
   before that NOTIFY (milliseconds) may be ordered either way. With
   ``require_stable`` a partition whose inbox lock an open transaction holds (it called
   commit_offsets and has not ended) answers UNSTABLE_OFFSET_COMMIT, as a pending
   TxnOffsetCommit does (KIP-447): a new owner of the partition waits for the zombie's
   transaction to end instead of reading a position the zombie may still move.
3. **Drain**. ``drain_locked`` appends the group's pending rows (the newest per partition) to
   ``__consumer_offsets`` as ordinary offset commit records through the coordinator's one
   write path, then deletes exactly those rows. A crash between the two leaves rows that the
   next drain appends again: the same values, and nothing newer can be in the log in between
   (every write drains first), so the group's offsets end the same. Drains are woken by
   ``NOTIFY oncelog_inbox '<group>'`` (delivered at the application's COMMIT; the drain starts
   ``linger_s`` later, so a busy group's commits go in one append), by every offset operation
   of the group, and by a poll every ``poll_s`` (``InboxDrains``, built with the coordinator
   whose drains it wakes).

``DatabaseInbox`` is the group coordinator's ``OffsetInbox`` (coordinators/offset_inbox.py),
handed to it when it is built; its statements are cluster/inbox.py's. The mirror and drain
writes run on a worker thread (``asyncio.to_thread``) with their own
connection; ``has_pending`` (once per offset write) is one indexed read on an asynchronous
connection; ``overlay`` (OffsetFetch is synchronous) is one read on the event loop's connection,
bounded by the group's pending rows (at most one per partition per open application
transaction plus those not yet drained).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from oncelog.broker.coordinators.offset_inbox import Execute, OffsetRows
from oncelog.cluster import inbox as store_inbox
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import StoreUnavailable
from oncelog.cluster.inbox_schema import INBOX_CHANNEL
from oncelog.cluster.notify import ChannelListener
from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.offsets import CommittedOffset
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import Result
from oncelog.protocol.errors import InvalidGroupId, KafkaError, UnstableOffsetCommit
from oncelog.storable import unstorable
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator

__all__ = ["MAX_GROUP_ID_BYTES", "DatabaseInbox", "InboxDrains", "snapshot", "unstorable_group_id"]

log = logging.getLogger(__name__)

POLL_S = 1.0
#: a woken drain waits this long first, so that the commits of a busy group go in one append
#: (OffsetFetch reads pending commits through: this delays no reader)
DRAIN_LINGER_S = 0.05
WARN_EVERY_S = 10.0

#: The longest group id (UTF-8 bytes) the store keeps: ``oncelog.inbox_group``'s primary key and
#: ``oncelog.inbox``'s index are btrees, whose entries PostgreSQL caps at 2,704 bytes (a third of
#: a page) after compression; ~2.7 KB of random characters does not compress. 2,048 leaves room
#: for the index's own bytes whatever the id holds.
MAX_GROUP_ID_BYTES = 2_048

#: kind, generation, state, {member id: generation or member epoch}
Snapshot = tuple[str, int, str, dict[str, int]]
ABSENT: Snapshot = ("none", -1, "Dead", {})


def unstorable_group_id(group_id: str) -> str | None:
    """Why the store cannot keep ``group_id`` (a short reason), or None when it can."""
    why = unstorable(group_id)
    if why is not None:
        return why
    if len(group_id) * 4 > MAX_GROUP_ID_BYTES and len(group_id.encode("utf-8")) > MAX_GROUP_ID_BYTES:
        return f"is longer than {MAX_GROUP_ID_BYTES} UTF-8 bytes"
    return None


def _member_key(member_id: str) -> str:
    """A member id as the mirror's jsonb can hold it (NUL -> U+FFFD; no application can name it)."""
    return member_id.replace("\x00", "\ufffd") if "\x00" in member_id else member_id


def snapshot(shard: GroupShard, group_id: str) -> Snapshot:
    """What the store's fencing needs of ``group_id`` in ``shard`` (a GroupShard), as the shard
    decides an OffsetCommit: a classic group wins over a consumer group of the same id."""
    group = shard.groups.get(group_id)
    if group is not None:
        return ("classic", group.generation, group.state.value,
                {_member_key(m): group.generation for m in group.members})
    consumer = shard.consumers.groups.get(group_id)
    if consumer is not None:
        return ("consumer", consumer.group_epoch, "consumer",
                {_member_key(m.member_id): m.member_epoch for m in consumer.members.values()})
    return ABSENT


def _groups(shard: GroupShard) -> set[str]:
    """The groups of ``shard`` the store can hold (others were refused, or are older than the
    rule: nothing in the store can name them)."""
    return {g for g in (*shard.groups, *shard.consumers.groups) if unstorable_group_id(g) is None}


class _Warnings:
    """One warning per ``WARN_EVERY_S`` at most (a store down must not flood the log)."""

    def __init__(self, node_id: int) -> None:
        self._node = node_id
        self._warned = -WARN_EVERY_S

    def __call__(self, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_S:
            self._warned = now
            log.warning("node %d: " + msg, self._node, *args)


class DatabaseInbox:
    """The group coordinator's ``OffsetInbox`` on the store (see the module docstring)."""

    def __init__(self, connect: Callable[[], Any], aconnect: Callable[[], Awaitable[Any]], node_id: int) -> None:
        """``connect``: a new autocommit psycopg connection (two are opened: the writer and the
        event loop's reader); ``aconnect``: a new autocommit psycopg AsyncConnection
        (``has_pending``'s). Nothing connects before the first call."""
        self._writer = StoreConnection(connect, f"inbox writer {node_id}")
        self._reader = StoreConnection(connect, f"inbox reader {node_id}")
        self._write_lock = asyncio.Lock()
        self._aconnect = aconnect
        self._async: Any = None
        self._checks: dict[str, list[asyncio.Future[bool]]] = {}
        self._checker: asyncio.Task[None] | None = None
        #: groups known to use the inbox (has_pending reads the store for these only)
        self.known: set[str] = set()
        #: groups whose mirror row carries uses_inbox (as far as this broker wrote it)
        self._flagged: set[str] = set()
        #: offsets partition -> group -> the snapshot last written to the store
        self._written: dict[int, dict[str, Snapshot]] = {}
        self.warn = _Warnings(node_id)
        self.drained = 0  # commits moved into __consumer_offsets since start (tests, logs)

    async def close(self) -> None:
        if self._checker is not None:
            await asyncio.gather(self._checker, return_exceptions=True)
        self._writer.close()
        self._reader.close()
        await self._drop_async()

    def check_group_id(self, group_id: str) -> None:
        """Raises InvalidGroupId for a group id the store cannot keep (``unstorable_group_id``):
        the group coordinator asks before any operation that changes a group."""
        why = unstorable_group_id(group_id)
        if why is not None:
            raise InvalidGroupId(f"a group id that {why} cannot be used on this cluster: its store "
                                 "(PostgreSQL) keeps every group's id for oncelog.commit_offsets")

    # -- 1. mirror --------------------------------------------------------------------------------

    async def mirror(self, shard: GroupShard, group_id: str | None, records: Sequence[tuple[Any, Any]]) -> None:
        """Write the groups of ``shard`` the operation may have changed (``group_id`` and the
        groups of its ``records``; all of them when ``group_id`` is None) whose snapshot
        changed since it was last written. A store failure is logged; the groups stay
        unwritten and are tried again at the next operation."""
        written = self._written.setdefault(shard.partition, {})
        current = _groups(shard)
        changed: dict[str, Snapshot] = {}
        candidates = (current | set(written)) if group_id is None else {group_id, *(k.group for k, _ in records)}
        for g in candidates:
            if unstorable_group_id(g) is not None:
                continue  # refused at the APIs; loaded from an older log: nothing in the store names it
            last = written.get(g)
            if last is None and g not in current:
                continue  # neither held nor ever written: nothing to say
            s = snapshot(shard, g)
            if s != last:
                changed[g] = s
        if changed:
            await self._write(shard.partition, changed, replace=False)

    async def mirror_partition(self, shard: GroupShard) -> None:
        """After ``shard`` was loaded: make every row of its partition describe it (groups it
        does not hold become kind 'none')."""
        self._written.pop(shard.partition, None)
        await self._write(shard.partition, {g: snapshot(shard, g) for g in _groups(shard)}, replace=True)
        try:
            known = await self._on_writer(store_inbox.known_groups, self._writer, shard.partition)
        except KafkaError as exc:
            self.warn("reading which groups use the inbox failed: %s", exc)
            return
        self.known.update(known)

    def forget(self, partition: int) -> None:
        """This broker no longer coordinates ``partition``."""
        self._written.pop(partition, None)

    async def _write(self, partition: int, snaps: dict[str, Snapshot], *, replace: bool) -> None:
        """Write ``snaps`` in one transaction, each group under its own savepoint: a group the
        store refuses is left out (logged, tried again at its next change) and the others are
        written. A broken connection fails them all (retried likewise)."""
        rows = [(partition, k, gen, state, json.dumps(members), g) for g, (k, gen, state, members) in snaps.items()]
        try:
            refused = await self._on_writer(lambda: store_inbox.write_mirror(self._writer, partition, rows,
                                                                             replace=replace))
        except KafkaError as exc:
            self.warn("writing the inbox's group mirror failed (retried at the next change): %s", exc)
            return
        for g, why in refused.items():
            self.warn("the store refused the mirror row of group %.100r (retried at its next change): %s", g, why)
        self._written.setdefault(partition, {}).update((g, s) for g, s in snaps.items() if g not in refused)

    # -- 2. read-through ----------------------------------------------------------------------------

    def overlay(self, group_id: str, rows: OffsetRows, asked: list[TopicPartition] | None,
                require_stable: bool) -> OffsetRows:
        """OffsetFetch's ``rows`` (the coordinator's answer) with the group's pending commits
        in place of older offsets (and added, when every partition was asked for), and
        UNSTABLE_OFFSET_COMMIT for the partitions an open transaction is committing (with
        ``require_stable``). Raises StoreUnavailable (retriable)."""
        if unstorable_group_id(group_id) is not None:
            return rows  # no application can have committed for it (nor can the store be asked)
        check = [(tp.topic, tp.partition) for tp, _o, e in rows if e is None] if require_stable else []
        found = store_inbox.fetch(self._reader, group_id, check)
        if not found:
            return rows
        pending: dict[TopicPartition, tuple[CommittedOffset | None, bool]] = {}
        for topic, partition, offset, epoch, metadata, ts, unstable in found:
            o = None if offset is None else CommittedOffset(offset, epoch, metadata, ts, -1, -1)
            pending[TopicPartition(topic, partition)] = (o, bool(unstable))
        out = []
        for tp, o, e in rows:
            got = pending.pop(tp, None)
            if e is not None or got is None:
                out.append((tp, o, e))
            elif got[1]:
                out.append((tp, None, UnstableOffsetCommit(f"group {group_id} {tp}: an open database transaction "
                                                           "is committing its offset (oncelog.commit_offsets)")))
            else:
                out.append((tp, got[0], None))
        if asked is None:
            out.extend((tp, o, None) for tp, (o, unstable) in sorted(pending.items()) if o is not None and not unstable)
        return out

    # -- 3. drain -------------------------------------------------------------------------------------

    async def has_pending(self, group_id: str) -> bool:
        """Whether ``group_id`` has commits not drained yet. False without a read for a group
        not known to use the inbox (its first commit's NOTIFY, a poll, or the flag its first
        drain set in the mirror makes it known). Otherwise the checks of concurrent callers go
        in one indexed read on an asynchronous connection (nothing blocks the event loop),
        started after each of them asked. Raises StoreUnavailable."""
        if group_id not in self.known:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._checks.setdefault(group_id, []).append(fut)
        if self._checker is None or self._checker.done():
            self._checker = asyncio.get_running_loop().create_task(self._check_batches(), name="inbox checks")
        return await fut

    async def _check_batches(self) -> None:
        while self._checks:
            batch, self._checks = self._checks, {}
            try:
                found = await self._pending_groups(list(batch))
            except KafkaError as exc:
                for futs in batch.values():
                    for f in futs:
                        if not f.done():
                            f.set_exception(exc)
                continue
            for group_id, futs in batch.items():
                for f in futs:
                    if not f.done():
                        f.set_result(group_id in found)

    async def _pending_groups(self, group_ids: list[str]) -> set[str]:
        """Which of ``group_ids`` have pending rows; retried once on a new connection when the
        old one broke. Raises StoreUnavailable."""
        for attempt in (1, 2):
            try:
                if self._async is None or self._async.closed or self._async.broken:
                    await self._drop_async()
                    self._async = await self._aconnect()
                cur = await self._async.execute(store_inbox.PENDING_GROUPS, (group_ids,))
                return {row[0] for row in await cur.fetchall()}
            except Exception as exc:
                await self._drop_async()
                if attempt == 2:
                    raise StoreUnavailable(f"inbox: read failed: {exc}") from None
        raise AssertionError("unreachable")

    async def _drop_async(self) -> None:
        conn, self._async = self._async, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - a broken connection
                pass

    async def drain_locked(self, shard: GroupShard, group_id: str, execute: Execute, now: int) -> int:
        """Move ``group_id``'s pending commits into the log: ``execute(shard, result, now)``
        appends and replays (the coordinator's write path; the caller holds the shard's lock),
        then the rows are deleted. Returns how many rows. Raises the append's or the store's
        KafkaError (the rows stay, for the next drain)."""
        rows = await self._on_writer(store_inbox.pending, self._writer, group_id)
        if not rows:
            return 0
        newest: dict[tuple[str, int], tuple] = {}
        for row in rows:  # in id order: the newest of a partition wins
            newest[(row[1], row[2])] = row
        records = [(rec.OffsetKey(group_id, topic, partition), rec.OffsetValue(offset, metadata, ts, epoch, -1))
                   for (_id, topic, partition, offset, epoch, metadata, ts) in newest.values()]
        await execute(shard, Result(records, {}), now)
        await self._on_writer(store_inbox.delete, self._writer, [r[0] for r in rows])
        self.drained += len(rows)
        if group_id not in self._flagged:  # known as an inbox user by the next coordinators too
            await self._on_writer(store_inbox.flag_used, self._writer, group_id)
            self._flagged.add(group_id)
        return len(rows)

    async def pending_group_ids(self) -> list[str]:
        """Every group with pending commits (the poll's). Raises StoreUnavailable."""
        return await self._on_writer(store_inbox.pending_group_ids, self._writer)

    async def _on_writer(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a worker thread, one at a time (the writer's connection)."""
        async with self._write_lock:
            return await asyncio.to_thread(fn, *args)


class InboxDrains:
    """Wakes the drains of ``coordinator`` (the group coordinator ``inbox`` belongs to): at
    ``NOTIFY oncelog_inbox '<group>'`` (a listener thread with its own connection, from
    ``connect``) and at a poll every ``poll_s``, for the groups coordinated here."""

    def __init__(self, inbox: DatabaseInbox, coordinator: "GroupCoordinator", connect: Callable[[], Any],
                 node_id: int, *, poll_s: float = POLL_S, linger_s: float = DRAIN_LINGER_S) -> None:
        self._inbox = inbox
        self._coordinator = coordinator
        self._poll_s = poll_s
        self._linger_s = linger_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener = ChannelListener(connect, INBOX_CHANNEL, self._notified, f"oncelog-inbox-listen-{node_id}",
                                         "inbox notifications")
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waking: set[str] = set()

    def start(self) -> None:
        """Listen and poll for pending commits."""
        self._loop = asyncio.get_running_loop()
        self._listener.start()
        self._poller = self._loop.create_task(self._poll_forever(), name="inbox poll")

    async def stop(self) -> None:
        """Stop waking drains; wait for the ones running."""
        await asyncio.to_thread(self._listener.close)
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=30)

    def _notified(self, payload: str) -> None:
        """On the listener thread: payload = the group id."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake, payload)

    def wake(self, group_id: str) -> None:
        """Drain ``group_id`` soon if this broker coordinates it (once for many wakes)."""
        self._inbox.known.add(group_id)
        coordinator = self._coordinator
        if group_id in self._waking or coordinator.partition_for(group_id) not in coordinator.shards:
            return
        self._waking.add(group_id)
        task = asyncio.get_running_loop().create_task(self._drain(group_id), name=f"inbox drain {group_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self, group_id: str) -> None:
        try:
            await asyncio.sleep(self._linger_s)
            self._waking.discard(group_id)  # a NOTIFY from now on wakes another drain
            await self._coordinator.drain_inbox(group_id)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            self._inbox.warn("draining the inbox of group %s failed (retried at the next poll): %s", group_id, exc)
        except Exception:
            log.exception("bug: draining the inbox of group %s failed", group_id)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                groups = await self._inbox.pending_group_ids()
            except KafkaError as exc:
                self._inbox.warn("inbox poll failed: %s", exc)
                continue
            for group_id in groups:
                self.wake(group_id)
