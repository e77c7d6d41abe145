"""The object writer of one broker (issue 29, docs/DISKLESS.md §2.3): every batch the broker
appends to a diskless partition — of any topic and partition — goes into ONE object per
interval, which is uploaded and then committed in ONE PostgreSQL transaction.

Theory of operation. ``submit(req)`` is the diskless engine's ``ObjectCommitter``
(storage/engines/diskless/log.py): the partition's leader has already assigned the batch's
offsets and stamped them (and its leader epoch) into the 16 bytes outside the CRC; the future
completes after the COMMIT that holds the batch's coordinates, or fails with a KafkaError.

1. The batch joins the open object (``_Open``). Objects close on a cadence: at the ticks
   ``origin + n * interval_s`` of a fixed grid (``origin``: when the writer started), the open
   object closes if it holds anything — so a batch waits at most one interval for its object to
   close, whenever it came, and a client whose next request for a partition waits for the
   previous one's answer (librdkafka, kafka-python, aiokafka) gets it into the next object,
   one interval later, not one interval after the object's first batch. The timer runs only
   while an object is open (no wake-ups when idle). An object also closes when it holds
   ``max_bytes``, or at once when a control batch (a transaction marker) joins it: a marker
   waits for no interval. So the objects closed by the cadence are at most one per interval
   (the PUT bound: ``1 / interval_s`` per second, whatever the traffic), plus one per
   ``max_bytes`` written and one per marker that finds data batches in the open object.
2. A closed object is uploaded with ``put_if_absent`` under a fresh key (diskless/layout.py) —
   only when it holds data batches: control batches are committed inline (their ~80 bytes in
   the coordinates' ``inline_data``), no PUT. Uploads are not limited in number, only by the
   bytes the writer holds (``buffer_max_bytes``, below): while the store is slow, the next
   objects close on time and upload beside it, and the next one fills meanwhile.
3. Commits are made in object order (object k+1 commits after k has), on one thread with its
   own PostgreSQL connection: ONE statement, ``oncelog_dl_commit`` (cluster/diskless_schema.py), which
   inserts the object row and every batch's coordinates (conditional, per batch, on the leader
   epoch and the log end), so a producer's batches keep their order across objects and a
   deposed leader writes nothing. A batch the outbox drainer built (issue 31,
   docs/DATABASE.md) carries the ids of its ``oncelog.outbox`` rows (``ObjectAppend.drained``):
   the same statement deletes them with the batch's coordinates, all or none, so a row is gone
   iff its record is committed; a failed or lost commit leaves them pending for the next drain.
4. After COMMIT: the committed batches are put in the byte cache (a tail consumer reads them
   without a GET), their coordinates handed to their partition's engine (``register``), then
   the futures complete: the Produce responses go out only now.

Backpressure (``buffer_max_bytes``, the broker's ``diskless.buffer.max.bytes``). The bytes the
writer holds — the open object and the objects being uploaded or committed — are bounded: a
batch that would take them past the bound (unless nothing is held: one batch larger than the bound
still goes) waits in a FIFO (``_waiting``) until objects have committed (or failed) and made room,
and so does every batch after it, of any partition: the writer's order is the order of the
offsets the engines assigned, and each partition's batches must reach the store in that order.
Nothing blocks: the batch's future (its Produce answer) simply completes later, so the client's
in-flight window fills and it stops sending, as with a slow Kafka leader; the request bytes
waiting here are the ones the server already bounds (the request memory,
``queued.max.request.bytes``, holds a pipelined Produce's bytes until its answer:
broker/network/server.py).

Failures. An upload that fails past the store's deadline fails every batch of the object with
the store's error (KAFKA_STORAGE_ERROR / REQUEST_TIMED_OUT, retriable; nothing committed); the
engines of their partitions then refuse appends until their leader is rebuilt from the store,
and later objects' batches of those partitions are refused by the store (log end moved). A
database error fails the object's batches (nothing committed; the object becomes an orphan,
deleted by the collector after the grace period). A connection lost at COMMIT is resolved, as
the group committer does, by asking the store on a new connection which batches are there.

Threading: ``submit`` may be called from any thread (it hops to the loop); everything else runs
on the event loop given to ``start``, except the commit statement (the commit thread).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced, LogEndMoved, StoreUnavailable
from oncelog.diskless import layout
from oncelog.diskless.cache import ByteCache
from oncelog.diskless.object_store import ObjectStore, ObjectStoreFailed
from oncelog.protocol.errors import KafkaError, UnknownTopicOrPartition
from oncelog.protocol.records import parse_header
from oncelog.storage.engines.diskless.log import Committed, ObjectAppend

__all__ = ["Committed", "ObjectWriter", "WriterStats"]

log = logging.getLogger(__name__)

_COMMIT = ("SELECT idx, status, store_epoch, store_leader, store_end FROM oncelog_dl_commit("
           "%s, %s, %s, %b::int8[], %b::int4[], %b::int8[], %b::int8[], %b::int4[], %b::int2[], %b::int8[], "
           "%b::int8[], %b::int8[], %b::int2[], %b::int4[], %b::bool[], %b::bool[], %b::int8[], %b::int4[], "
           "%b::bytea[], %b::int4[], %b::int8[])")
_LANDED = (
    "SELECT b.partition_id, b.base_offset FROM oncelog_dl_batch b "
    "JOIN unnest(%s::int8[], %s::int8[], %s::int4[], %s::int8[]) AS r(pid, base, epoch, last) "
    "ON b.partition_id = r.pid AND b.base_offset = r.base AND b.leader_epoch = r.epoch AND b.last_offset = r.last"
)
_APPENDED, _NO_PARTITION, _FENCED, _END_MOVED, _NOT_DRAINED = 0, 1, 2, 3, 4
RESOLVE_S = 5.0
RESOLVE_PAUSE_S = 0.2


@dataclass(slots=True)
class WriterStats:
    objects: int = 0  # objects uploaded
    object_bytes: int = 0
    commits: int = 0  # commit statements that wrote at least one batch
    batches: int = 0  # batches committed
    refused: int = 0
    failed_objects: int = 0
    waited: int = 0  # batches that waited for room (``buffer_max_bytes``)
    resolved: int = 0  # commits whose answer was lost, resolved by asking the store
    #: where the committed batches' time went, summed over the batches (seconds, the loop's
    #: clock; ``PHASES``): divided by ``timed`` it is a batch's mean time in each phase
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    timed: int = 0  # the batches ``phase_s`` sums over (those of objects that committed a batch)


#: a batch's way through the writer (``WriterStats.phase_s``): ``room`` waiting for buffer room
#: (``buffer_max_bytes``), ``close`` in the open object until it closes, ``upload`` its object's
#: PUT, ``order`` waiting for the previous object's commit, ``commit`` the commit statement (with
#: the hop to the commit thread and back), ``complete`` caching, coordinates and the futures
PHASES = ("room", "close", "upload", "order", "commit", "complete")


@dataclass(slots=True)
class _Open:
    reqs: list[ObjectAppend] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None
    admitted: float = 0.0  # the sum of its batches' admission times (loop clock)
    room: float = 0.0  # the time its batches waited for room, summed


class ObjectWriter:
    """See the module docstring. ``connect`` returns a new autocommit psycopg connection."""

    def __init__(self, store: ObjectStore, connect: Callable[[], Any], cache: ByteCache, *, broker_id: int,
                 interval_s: float = 0.25, max_bytes: int = 8 << 20,
                 buffer_max_bytes: int = 64 << 20,
                 incarnation: str | None = None, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self.cache = cache
        self.broker_id = broker_id
        self.incarnation = incarnation or uuid.uuid4().hex
        self.interval_s = interval_s
        self.max_bytes = max_bytes
        self.buffer_max_bytes = buffer_max_bytes
        #: bytes of the open object and of the objects not committed yet (bounded: backpressure)
        self.buffered = 0
        #: batches waiting for room, with when they started to wait (loop clock)
        self._waiting: collections.deque[tuple[ObjectAppend, float]] = collections.deque()
        self._wall_ms = wall_ms
        self._db = StoreConnection(connect, f"node {broker_id} diskless commits")
        self._db_thread = ThreadPoolExecutor(1, thread_name_prefix=f"oncelog-diskless-commit-{broker_id}")
        self._origin = 0.0  # the cadence's grid: origin + n * interval_s (loop clock)
        self._last_tick = float("-inf")  # the last tick that closed an object
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open = _Open()
        self._last_done: asyncio.Future[None] | None = None  # the previous object's commit
        self._tasks: set[asyncio.Task] = set()
        self._listeners: dict[int, Callable[[list[Committed]], None]] = {}
        self._closing = False
        self.stats = WriterStats()

    def start(self, loop: asyncio.AbstractEventLoop) -> "ObjectWriter":
        self._loop = loop
        self._origin = loop.time()
        return self

    # -- engines ----------------------------------------------------------------------------

    def register(self, partition_id: int, listener: Callable[[list[Committed]], None]) -> None:
        """``listener`` gets the coordinates of the partition's committed batches (on the loop,
        before their futures complete)."""
        self._listeners[partition_id] = listener

    def unregister(self, partition_id: int, listener: Callable[[list[Committed]], None]) -> None:
        if self._listeners.get(partition_id) == listener:
            del self._listeners[partition_id]

    # -- the ObjectCommitter protocol (storage/engines/diskless/log.py) ------------------------------------------------------------

    def submit(self, req: ObjectAppend) -> Future:
        if self._closing or self._loop is None:
            raise StoreUnavailable(f"{req.what}: the diskless writer is closed")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._add(req)
        else:
            self._loop.call_soon_threadsafe(self._add, req)
        return req.future

    def _add(self, req: ObjectAppend) -> None:
        if self._closing:
            _fail(req, StoreUnavailable(f"{req.what}: the diskless writer is closed"))
            return
        if self._waiting or (self.buffered and self.buffered + len(req.data) > self.buffer_max_bytes):
            assert self._loop is not None
            self._waiting.append((req, self._loop.time()))  # no room: wait (in order) for objects to commit
            self.stats.waited += 1
            return
        self._admit(req)

    def _admit(self, req: ObjectAppend, since: float | None = None) -> None:
        """``req`` joins the open object (``since``: when it started waiting for room)."""
        assert self._loop is not None
        now = self._loop.time()
        self.buffered += len(req.data)
        o = self._open
        o.reqs.append(req)
        o.size += len(req.data)
        o.admitted += now
        if since is not None:
            o.room += now - since
        if req.is_control or o.size >= self.max_bytes:
            self._close_open()
        elif o.timer is None:
            tick = self._origin + (math.floor((now - self._origin) / self.interval_s) + 1) * self.interval_s
            if tick <= self._last_tick:  # the loop ran the last tick's timer a hair early
                tick = self._last_tick + self.interval_s
            o.timer = self._loop.call_at(tick, self._tick, tick)

    def _tick(self, tick: float) -> None:
        """The cadence: the open object closes (at most one such close per tick)."""
        self._last_tick = tick
        self._close_open()

    def _close_open(self) -> None:
        o, self._open = self._open, _Open()
        if o.timer is not None:
            o.timer.cancel()
        if not o.reqs:
            return
        assert self._loop is not None
        before = self._last_done
        done: asyncio.Future[None] = self._loop.create_future()
        self._last_done = done
        task = self._loop.create_task(self._ship(o, before, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one object -------------------------------------------------------------------------

    async def _ship(self, o: _Open, before: "asyncio.Future[None] | None", done: "asyncio.Future[None]") -> None:
        try:
            await self._ship_in_order(o, before)
        except Exception as exc:  # noqa: BLE001 - a bug: never leave a producer waiting
            log.exception("diskless: shipping an object failed")
            for r in o.reqs:
                _fail(r, StoreUnavailable(f"{r.what}: diskless write failed ({type(exc).__name__})",
                                          outcome_unknown=True))
        finally:
            done.set_result(None)
            self._released(o.size)

    def _released(self, size: int) -> None:
        """An object committed (or failed): its bytes leave the buffer; batches that waited for
        room join the open object, oldest first, while they fit."""
        self.buffered -= size
        while self._waiting and not self._closing:
            req, since = self._waiting[0]
            if self.buffered and self.buffered + len(req.data) > self.buffer_max_bytes:
                return
            self._waiting.popleft()
            self._admit(req, since)

    async def _ship_in_order(self, o: _Open, before: "asyncio.Future[None] | None") -> None:
        assert self._loop is not None
        clock = self._loop.time
        reqs = o.reqs
        closed = clock()
        data = [(r.partition_id, r.data) for r in reqs if not r.is_control]
        key: str | None = None
        body_len = 0
        entries: list[layout.ObjectEntry] = []
        failure: KafkaError | None = None
        if data:
            now = self._wall_ms()
            body, entries = layout.build(self.broker_id, now, data)
            body_len = len(body)
            key = layout.new_key(self.broker_id, self.incarnation, now)
            try:
                created = await self.store.put_if_absent(key, body)
                if not created:
                    raise ObjectStoreFailed(f"object {key} exists already (a key is never reused: a bug)")
                self.stats.objects += 1
                self.stats.object_bytes += body_len
            except KafkaError as exc:
                failure = exc
        uploaded = clock()
        if before is not None:
            await asyncio.shield(before)  # commits in object order
        ordered = clock()
        if failure is not None:
            self.stats.failed_objects += 1
            log.warning("diskless: upload of %d batch(es) failed: %s", len(data), failure)
            for r in reqs:
                _fail(r, failure)
            return
        places: list[tuple[int, int]] = []
        it = iter(entries)
        for r in reqs:
            if r.is_control:
                places.append((0, len(r.data)))
            else:
                e = next(it)
                places.append((e.byte_offset, e.size))
        results = await self._loop.run_in_executor(self._db_thread, self._commit, key, body_len, reqs, places)
        committed = clock()
        accepted: dict[int, list[Committed]] = {}
        ok: list[ObjectAppend] = []
        for r, (off, size), err in zip(reqs, places, results):
            if err is not None:
                self.stats.refused += 1
                continue
            inline = r.data if r.is_control else None
            if not r.is_control:
                assert key is not None
                self.cache.put(key, off, r.data)
            accepted.setdefault(r.partition_id, []).append(
                Committed(r.base_offset, r.last_offset, size, None if r.is_control else key, off, r.leader_epoch,
                          inline))
            ok.append(r)
        if ok:
            self.stats.commits += 1
            self.stats.batches += len(ok)
        for pid, coords in accepted.items():
            listener = self._listeners.get(pid)
            if listener is not None:
                try:
                    listener(coords)
                except Exception:  # noqa: BLE001 - a listener's bug must not stop the answers
                    log.exception("diskless: coordinate listener failed")
        for r, err in zip(reqs, results):
            if err is None:
                if r.future.set_running_or_notify_cancel():
                    r.future.set_result(None)
            else:
                _fail(r, err)
        if ok:
            n = len(reqs)
            phase = self.stats.phase_s
            phase["room"] += o.room
            phase["close"] += n * closed - o.admitted
            phase["upload"] += n * (uploaded - closed)
            phase["order"] += n * (ordered - uploaded)
            phase["commit"] += n * (committed - ordered)
            phase["complete"] += n * (clock() - committed)
            self.stats.timed += n

    # -- the commit thread ------------------------------------------------------------------

    def _commit(self, key: str | None, size: int, reqs: list[ObjectAppend],
                places: list[tuple[int, int]]) -> list[KafkaError | None]:
        """ONE statement committing the object's batches; one error (None: committed) per batch."""
        cols: list[list] = [[] for _ in range(17)]
        for r, (off, sz) in zip(reqs, places):
            h = parse_header(r.data)
            for col, v in zip(cols, (r.partition_id, r.leader_epoch, r.base_offset, r.last_offset, h.records_count,
                                     h.attributes, h.base_timestamp, h.max_timestamp, r.producer_id,
                                     r.producer_epoch, r.base_sequence, r.is_transactional, r.is_control, off, sz,
                                     r.data if r.is_control else None, len(r.drained))):
                col.append(v)
        cols.append([i for r in reqs for i in r.drained])
        try:
            conn = self._db.raw()
        except StoreUnavailable as exc:
            return [StoreUnavailable(f"{r.what}: {exc}") for r in reqs]
        try:
            rows = conn.execute(_COMMIT, [key, self.broker_id, size, *cols]).fetchall()
            if len(rows) != len(reqs):
                raise RuntimeError(f"oncelog_dl_commit answered {len(rows)} rows for {len(reqs)} batches")
        except Exception as exc:  # noqa: BLE001
            unknown = conn.broken or isinstance(exc, psycopg.OperationalError)
            self._db.drop()
            landed = self._resolve(reqs) if unknown else [False] * len(reqs)
            log.warning("diskless commit of %d batch(es) failed%s: %s", len(reqs),
                        " (outcome unknown)" if landed is None else "", exc)
            if landed is None:
                return [StoreUnavailable(f"{r.what}: the store failed ({exc}); whether the batch was committed "
                                         f"is unknown", outcome_unknown=True) for r in reqs]
            return [None if ok else StoreUnavailable(f"{r.what}: the store failed ({exc}); nothing was written")
                    for r, ok in zip(reqs, landed)]
        out: list[KafkaError | None] = [None] * len(reqs)
        for idx, status, store_epoch, store_leader, store_end in rows:
            r = reqs[idx]
            if status == _APPENDED:
                continue
            if status == _FENCED:
                out[idx] = LeaderFenced(r.what, r.leader_epoch, store_epoch, store_leader)
            elif status == _END_MOVED:
                out[idx] = LogEndMoved(r.what, r.base_offset, store_end)
            elif status == _NOT_DRAINED:
                out[idx] = StoreUnavailable(f"{r.what}: outbox rows of the batch are gone (drained twice?)")
            else:
                out[idx] = UnknownTopicOrPartition(f"{r.what}: the partition is not in the store")
        return out

    def _resolve(self, reqs: list[ObjectAppend]) -> list[bool] | None:
        deadline = time.monotonic() + RESOLVE_S
        while True:
            try:
                conn = self._db.raw()
                found = set(conn.execute(_LANDED, [list(c) for c in zip(*(
                    (r.partition_id, r.base_offset, r.leader_epoch, r.last_offset) for r in reqs))]).fetchall())
                self.stats.resolved += 1
                return [(r.partition_id, r.base_offset) in found for r in reqs]
            except Exception as exc:  # noqa: BLE001
                self._db.drop()
                log.info("diskless: asking the store what the last commit wrote failed: %s", exc)
            if time.monotonic() + RESOLVE_PAUSE_S > deadline:
                return None
            time.sleep(RESOLVE_PAUSE_S)

    # -- closing ----------------------------------------------------------------------------

    async def flush(self) -> None:
        """Close the open object now and wait until every object shipped, and those of the
        batches that waited for room (tests, close)."""
        self._close_open()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            self._close_open()

    async def close(self) -> None:
        """Ship what is open, wait for it, then stop the commit thread."""
        await self.flush()
        self._closing = True
        await asyncio.get_running_loop().run_in_executor(self._db_thread, self._db.drop)
        self._db_thread.shutdown(wait=True)

    def close_now(self) -> None:
        """Synchronous close (the broker's cluster parts close without a loop): fail what is
        open or in flight that has not committed yet, stop the commit thread."""
        self._closing = True
        o, self._open = self._open, _Open()
        if o.timer is not None:
            o.timer.cancel()
        waiting, self._waiting = [r for r, _since in self._waiting], collections.deque()
        for r in [*o.reqs, *waiting]:
            _fail(r, StoreUnavailable(f"{r.what}: the broker is stopping"))
        self._db_thread.shutdown(wait=True)
        self._db.drop()


def _fail(req: ObjectAppend, exc: KafkaError) -> None:
    if req.future.set_running_or_notify_cancel():
        req.future.set_exception(exc)
