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

from oncelog.broker.config import BrokerConfig
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.storage.atomic import write_atomically
from oncelog.broker.server import Server
from oncelog.clock import Clock, SystemClock
from oncelog.coordinator.producer_ids import ProducerIdManager

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
        self.transactions = None  # the transaction coordinator (issue 5)
        self.server = Server(self, config.host, config.port)
        self._housekeeping: list[asyncio.Task[None]] = []

    @property
    def advertised_host(self) -> str:
        return self.config.advertised

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> tuple[str, int]:
        data_dir = Path(self.config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = _load_or_create_cluster_id(data_dir)
        self.producer_ids = ProducerIdManager(data_dir / "producer_id_block.json")
        self.replicas.open()
        bound = await self.server.start()
        self._housekeeping.append(asyncio.create_task(self._retention_loop()))
        self._housekeeping.append(asyncio.create_task(self._producer_expiry_loop()))
        return bound

    async def stop(self) -> None:
        for task in self._housekeeping:
            task.cancel()
        await asyncio.gather(*self._housekeeping, return_exceptions=True)
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
