"""The coordinator runtime: the asyncio part that the group and transaction coordinators share.

A coordinator's state lives in an internal topic (``__consumer_offsets``, ``__transaction_state``),
one pure *shard* per partition (``coordinator/group/shard.py``, ``coordinator/transaction/shard.py``).
A shard decides; the runtime does the I/O around the decision, always in the same order:

1. load: every batch of the partition is replayed into a fresh shard (``replay_batch``, the
   same replay that live writes go through), yielding to the event loop every few batches;
   until a partition is loaded, ``shard`` raises COORDINATOR_LOAD_IN_PROGRESS;
2. serve: the coordinator asks the shard for a result, the runtime ``append``\\ s the result's
   records as one batch (``Partition.append_internal``), the coordinator replays them into the
   shard, performs what follows (answers to parked requests, transaction markers), and answers.

``append`` awaits the partition's append (``Partition.append_internal``, the same on every
storage engine): complete at the call on the local-files engine, at the group commit's COMMIT in
cluster mode. Requests to one shard that
append are serialized by the coordinator (the group coordinator holds ``lock(partition)`` from
the shard's decision to the replay; the transaction shard marks the transactional id pending,
so a second request for it meanwhile gets CONCURRENT_TRANSACTIONS).

Cluster mode (issue 15): the internal topic's partitions are loaded and unloaded one by one as
this broker gains and loses their leadership (``load_one`` / ``unload``); a partition led
elsewhere gets NOT_COORDINATOR, one still loading COORDINATOR_LOAD_IN_PROGRESS. A shard is
installed only if its partition is still the one the load started for (``Partition`` object
identity), so a load overtaken by a loss of leadership installs nothing. A load the store fails
(a ``KafkaError`` such as StoreUnavailable) is retried, 0.25 s doubling to 5 s, for as long as
this broker still leads that partition.

This runtime does not know what a shard is beyond its ``partition``: loading, encoding and
replaying are the coordinator's (callables passed in).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Awaitable, Callable, Generic, Iterable, Protocol, TypeVar

from oncelog.broker import periodic
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.load_report import SkipReport
from oncelog.protocol import records
from oncelog.protocol.errors import CoordinatorLoadInProgress, KafkaError, NotCoordinator
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

_LOAD_YIELD_EVERY = 64  # batches replayed between two yields to the event loop
_LOAD_RETRY_FIRST_S = 0.25  # cluster mode: a load the store failed is retried while led here,
_LOAD_RETRY_MAX_S = 5.0  # doubling in between


class ShardLike(Protocol):
    partition: int


S = TypeVar("S", bound=ShardLike)
#: (shard, header, batch bytes, now, report): apply one batch of the log; skips go to the report.
ReplayBatch = Callable[[S, records.BatchHeader, bytes, int, SkipReport], object]


class CoordinatorRuntime(Generic[S]):
    """The shards of one internal topic that this broker serves."""

    def __init__(self, name: str, topic: str, replicas: ReplicaManager, clock: Clock, *, logger: logging.Logger) -> None:
        """``name`` ("group coordinator") heads the runtime's own log lines."""
        self.name = name
        self.topic = topic
        self.replicas = replicas
        self.clock = clock
        self.log = logger
        self.shards: dict[int, S] = {}
        self.loading: set[int] = set()
        #: partition -> records or batches the last load skipped there (R22)
        self.skipped_on_load: dict[int, int] = {}
        self.loaded = asyncio.Event()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    # -- loading ----------------------------------------------------------------------------------

    async def load(self, partitions: Iterable[int], make_shard: Callable[[int], S], replay_batch: ReplayBatch) -> int:
        """Load ``partitions`` one after the other; returns how many loaded. A partition whose
        load fails on a bug is logged and stays unavailable; the others load."""
        wanted = sorted(partitions)
        self.loading.update(wanted)
        done = 0
        for p in wanted:
            try:
                await self._load(p, make_shard, replay_batch)
                done += 1
            except Exception:
                self.log.exception("bug: loading %s-%d failed; it stays unavailable", self.topic, p)
        if self.skipped_on_load:
            self.log.warning("%s: %s", self.name, SkipReport.total_line(self.topic, self.skipped_on_load))
        self.loaded.set()
        return done

    async def _load(self, p: int, make_shard: Callable[[int], S], replay_batch: ReplayBatch,
                    expect: object | None = None) -> None:
        shard = make_shard(p)
        report = SkipReport(f"{self.topic}-{p}", self.log)
        part = self.replicas.partition(self.topic, p)
        plog = part.log
        for n, (header, data) in enumerate(plog.iter_batches(), 1):
            replay_batch(shard, header, data, self.clock.now_ms(), report)
            if n % _LOAD_YIELD_EVERY == 0:
                await asyncio.sleep(0)
        if report.finish():
            self.skipped_on_load[p] = report.skipped
        if expect is not None and self.replicas.partitions.get(TopicPartition(self.topic, p)) is not expect:
            return  # the leadership moved while loading: nothing to serve
        self.shards[p] = shard
        self.loading.discard(p)

    def load_one(self, p: int, make_shard: Callable[[int], S], replay_batch: ReplayBatch,
                 then: Callable[[S], Awaitable[object]] | None = None) -> None:
        """Cluster mode: start loading partition ``p`` (this broker just became its leader) in
        the background; ``then(shard)`` runs once it is installed (finishing what the previous
        coordinator left, R19). An earlier load of ``p`` still running is cancelled."""
        self.unload(p)
        self.loading.add(p)
        task = asyncio.get_running_loop().create_task(self._load_one(p, make_shard, replay_batch, then))
        self._load_tasks[p] = task

    async def _load_one(self, p: int, make_shard: Callable[[int], S], replay_batch: ReplayBatch,
                        then: Callable[[S], Awaitable[object]] | None) -> None:
        started = self.clock.monotonic_ms()
        tp = TopicPartition(self.topic, p)
        try:
            part = self.replicas.partitions.get(tp)
            for attempt in itertools.count():
                if part is None or self.replicas.partitions.get(tp) is not part:
                    return  # not led here any more
                try:
                    await self._load(p, make_shard, replay_batch, expect=part)
                    break
                except KafkaError as exc:  # the store failed under the load: try again while we lead
                    wait = min(_LOAD_RETRY_MAX_S, _LOAD_RETRY_FIRST_S * 2 ** min(attempt, 8))
                    self.log.warning("%s: loading %s-%d failed (%s); retrying in %.1f s", self.name, self.topic, p,
                                     exc, wait)
                    await asyncio.sleep(wait)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception("bug: %s: loading %s-%d failed; it is retried when its leadership changes",
                               self.name, self.topic, p)
            return
        finally:
            self.loading.discard(p)
            if self._load_tasks.get(p) is asyncio.current_task():
                del self._load_tasks[p]
        shard = self.shards.get(p)
        if shard is None:
            return
        self.log.info("%s: %s-%d loaded in %d ms", self.name, self.topic, p, self.clock.monotonic_ms() - started)
        if then is not None:
            try:
                await then(shard)
            except Exception:
                self.log.exception("%s: finishing the work left on %s-%d failed; retried later", self.name, self.topic, p)

    def unload(self, p: int) -> S | None:
        """This broker stopped leading ``p``: forget its shard (its requests now get
        NOT_COORDINATOR) and cancel a load in progress. Returns the shard that was served."""
        task = self._load_tasks.pop(p, None)
        if task is not None:
            task.cancel()
        self.loading.discard(p)
        return self.shards.pop(p, None)

    def lock(self, partition: int) -> asyncio.Lock:
        """The lock of one shard, for coordinators that serialize decide-append-replay."""
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock

    # -- serving ----------------------------------------------------------------------------------

    def shard(self, partition: int, what: str) -> S:
        """The shard of ``partition``; raises CoordinatorLoadInProgress while it loads and
        NotCoordinator when this broker does not serve it. ``what`` names the key (for messages)."""
        if partition in self.loading:
            raise CoordinatorLoadInProgress(f"{self.topic}-{partition} ({what}) is still loading")
        shard = self.shards.get(partition)
        if shard is None:
            raise NotCoordinator(f"{self.topic}-{partition} ({what}) is not served by this broker")
        return shard

    async def append(self, partition: int, batch: bytes, now: int) -> int:
        """Append a coordinator's batch to ``partition``; returns its base offset once it is
        durable (written locally, or committed in the store). Raises the storage's KafkaError
        (the coordinator maps it to what its clients understand; NOT_LEADER_OR_FOLLOWER when
        this broker lost the partition)."""
        part = self.replicas.partition(self.topic, partition)
        return (await part.append_internal(batch, now)).base_offset

    def every(self, interval_s: float, job: Callable[[], object], what: str) -> asyncio.Task[None]:
        """Run ``job`` every ``interval_s`` until cancelled (broker/periodic.py)."""
        return periodic.every(interval_s, job, what, self.log)
