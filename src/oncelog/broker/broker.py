"""The broker: configuration, storage, coordinators and the server, started and stopped as one.

``Broker.start()`` opens the data directory (recovering every log), starts the housekeeping
tasks (retention) and listens. ``Broker.stop()`` stops listening, closes connections, and closes
every log cleanly (flushing it), so a SIGTERM never loses acknowledged data — and a SIGKILL does
not either, because every acknowledged batch is already in the log file (see config.py).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from pathlib import Path
from typing import Callable

from oncelog.broker.config import BrokerConfig
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.storage import cleaner
from oncelog.storage.atomic import write_atomically
from oncelog.broker.server import Server
from oncelog.clock import Clock, SystemClock
from oncelog.coordinator.group.service import GroupCoordinator
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction.coordinator import TXN_TOPIC, TransactionCoordinator, TxnSettings
from oncelog.faults import CrashPoints

log = logging.getLogger(__name__)


def _load_or_create_cluster_id(data_dir: Path) -> str:
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\n".encode())
    return cluster_id


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id = config.node_id
        self.replicas = ReplicaManager(config, self.clock)
        self.cluster_id = ""
        self.transactions: TransactionCoordinator | None = None  # set by start()
        self.groups: GroupCoordinator | None = None  # set by start()
        self.server = Server(self, config.host, config.port)
        self._housekeeping: list[asyncio.Task[None]] = []
        self.cleaner = cleaner.Cleaner()

    @property
    def advertised_host(self) -> str:
        return self.config.advertised

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def advertised_port(self) -> int:
        """The port advertised to clients: ``advertised.port`` if set, else the listening port."""
        return self.config.advertised_port or self.server.port

    async def start(self) -> tuple[str, int]:
        data_dir = Path(self.config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = _load_or_create_cluster_id(data_dir)
        self.producer_ids = ProducerIdManager(data_dir / "producer_id_block.json")
        cleaner.recover(data_dir)  # finish or undo a compaction interrupted by a crash
        self.replicas.open()
        self.groups = GroupCoordinator(self.replicas, self.config, self.clock)
        self.groups.start()  # creates __consumer_offsets, loads it in the background
        self._start_transaction_coordinator(data_dir)
        bound = await self.server.start()
        self._housekeeping.append(asyncio.create_task(self._retention_loop()))
        self._housekeeping.append(asyncio.create_task(self._producer_expiry_loop()))
        if self.config.log_cleaner_enable:
            self._housekeeping.append(asyncio.create_task(self._cleaner_loop()))
        return bound

    def _start_transaction_coordinator(self, data_dir: Path) -> None:
        cfg = self.config
        self.replicas.ensure_internal_topic(
            TXN_TOPIC,
            cfg.transaction_state_log_num_partitions,
            {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
        )
        epoch_file = data_dir / "transaction_coordinator_epoch"
        epoch = int(epoch_file.read_text()) + 1 if epoch_file.exists() else 0
        write_atomically(epoch_file, str(epoch).encode())
        groups = getattr(self, "groups", None)
        self.transactions = TransactionCoordinator(
            settings=TxnSettings(
                num_partitions=cfg.transaction_state_log_num_partitions,
                max_timeout_ms=cfg.transaction_max_timeout_ms,
                id_expiration_ms=cfg.transactional_id_expiration_ms,
                offsets_partitions=cfg.offsets_topic_num_partitions,
            ),
            partition=self.replicas.partition,
            producer_ids=self.producer_ids,
            now_ms=self.clock.now_ms,
            on_offsets_marker=self._on_offsets_marker,
            crash=CrashPoints(),
            coordinator_epoch=epoch,
        )
        loaded = self.transactions.load(lambda p: self.replicas.partition(TXN_TOPIC, p).log.iter_batches())
        log.info("transaction coordinator loaded %d transactional id(s), coordinator epoch %d", loaded, epoch)
        self._every(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms, self._transaction_timeouts)
        self._every(cfg.transaction_remove_expired_transaction_cleanup_interval_ms, self._transactional_id_expiry)

    def _on_offsets_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        groups = getattr(self, "groups", None)
        if groups is not None:
            groups.complete_transaction(partition, producer_id, commit)

    def _transaction_timeouts(self) -> None:
        assert self.transactions is not None
        aborted = self.transactions.abort_timed_out()
        if aborted:
            log.info("aborted %d timed-out transaction(s): %s", len(aborted), ", ".join(aborted))
        self.transactions.retry_markers()

    def _transactional_id_expiry(self) -> None:
        assert self.transactions is not None
        expired = self.transactions.expire_transactional_ids()
        if expired:
            log.info("expired %d transactional id(s)", len(expired))

    def _every(self, interval_ms: int, job: Callable[[], None]) -> None:
        """Run ``job`` every ``interval_ms`` on the event loop until stop(); a failing run is
        logged as a bug and the next one still happens."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    job()
                except Exception:
                    log.exception("bug: housekeeping job %s failed", getattr(job, "__name__", job))

        self._housekeeping.append(asyncio.get_running_loop().create_task(loop()))

    async def stop(self) -> None:
        self.cleaner.stop.set()
        for task in self._housekeeping:
            task.cancel()
        await asyncio.gather(*self._housekeeping, return_exceptions=True)
        if self.groups is not None:
            await self.groups.stop()
        await self.server.close()
        self.replicas.close()

    async def _producer_expiry_loop(self) -> None:
        # Kafka checks every producer.id.expiration.check.interval.ms (10 minutes).
        interval = min(600.0, max(self.config.producer_id_expiration_ms / 1000 / 10, 1.0))
        while True:
            await asyncio.sleep(interval)
            try:
                gone = self.replicas.expire_producers()
                if gone:
                    log.info("expired %d idle producer id(s)", gone)
            except Exception:
                log.exception("bug: producer id expiry failed")

    async def _cleaner_loop(self) -> None:
        """Compact the partitions of compacted topics (R4), one after the other, every
        log.cleaner.backoff.ms. A partition's new segments are built in a thread; the swap and
        everything else happen on the event loop (storage/cleaner.py)."""
        while True:
            await asyncio.sleep(self.config.log_cleaner_backoff_ms / 1000)
            for tp, part in list(self.replicas.partitions.items()):
                try:
                    plan = self.cleaner.plan(part.log, part.last_stable_offset, self.clock.now_ms())
                    if plan is None:
                        continue
                    await asyncio.to_thread(self.cleaner.build, plan)  # discards the plan if it fails
                    if self.replicas.partitions.get(tp) is not part:
                        self.cleaner.abort(plan)  # the topic was deleted meanwhile
                        continue
                    res = self.cleaner.commit(plan)
                    if res.bytes_after != res.bytes_before:
                        log.info("compacted %s: %d segment(s), %d bytes -> %d segment(s), %d bytes", tp,
                                 res.segments_before, res.bytes_before, res.segments_after, res.bytes_after)
                except asyncio.CancelledError:
                    raise
                except InterruptedError:
                    return
                except Exception:
                    log.exception("compaction of %s failed; it is retried in the next pass", tp)

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                deleted = self.replicas.enforce_retention()
                if deleted:
                    log.info("retention deleted %d segment(s)", deleted)
            except Exception:
                log.exception("bug: retention check failed")
