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

``append`` is synchronous: the local log writes before it returns, so no other request sees a
half-applied result. (A store that commits asynchronously, as the cluster's will, needs the
shard to hold its decided-but-unwritten moves as pending, as the transaction shard already
does; issue 15.)

This runtime does not know what a shard is beyond its ``partition``: loading, encoding and
replaying are the coordinator's (callables passed in).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Generic, Iterable, Protocol, TypeVar

from oncelog.broker import periodic
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.load_report import SkipReport
from oncelog.protocol import records
from oncelog.protocol.errors import CoordinatorLoadInProgress, NotCoordinator

log = logging.getLogger(__name__)

_LOAD_YIELD_EVERY = 64  # batches replayed between two yields to the event loop


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

    async def _load(self, p: int, make_shard: Callable[[int], S], replay_batch: ReplayBatch) -> None:
        shard = make_shard(p)
        report = SkipReport(f"{self.topic}-{p}", self.log)
        plog = self.replicas.partition(self.topic, p).log
        for n, (header, data) in enumerate(plog.iter_batches(), 1):
            replay_batch(shard, header, data, self.clock.now_ms(), report)
            if n % _LOAD_YIELD_EVERY == 0:
                await asyncio.sleep(0)
        if report.finish():
            self.skipped_on_load[p] = report.skipped
        self.shards[p] = shard
        self.loading.discard(p)

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

    def append(self, partition: int, batch: bytes, now: int) -> int:
        """Append a coordinator's batch to ``partition``; returns its base offset. Raises the
        storage's KafkaError (the coordinator maps it to what its clients understand)."""
        return self.replicas.partition(self.topic, partition).append_internal(batch, now).base_offset

    def every(self, interval_s: float, job: Callable[[], object], what: str) -> asyncio.Task[None]:
        """Run ``job`` every ``interval_s`` until cancelled (broker/periodic.py)."""
        return periodic.every(interval_s, job, what, self.log)
