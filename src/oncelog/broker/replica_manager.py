"""The topics and partitions this broker holds, and their metadata on disk.

Theory of operation: the set of topics (name, topic id, partition count, topic configs) lives in
``<data-dir>/topics.json``, replaced atomically (write a temporary file, fsync, rename, fsync the
directory) on every change, so a crash leaves either the old or the new set. Each partition's
log lives in ``<data-dir>/<topic>-<partition>/``. On start, partition directories that belong to
no known topic (a delete interrupted by a crash) are removed; topics whose directories are
missing get empty logs.

Single-threaded: called only from the broker's event loop.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.broker import topic_config
from oncelog.broker.config import BrokerConfig
from oncelog.broker.partition import Partition
from oncelog.clock import Clock
from oncelog.protocol.errors import (
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidTopic,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from oncelog.storage.atomic import write_atomically
from oncelog.storage.log import PartitionLog
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249
MAX_PARTITIONS = 10_000


@dataclass
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "id": str(self.topic_id),
            "partitions": self.num_partitions,
            "configs": self.configs,
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, d: dict) -> "TopicMeta":
        return cls(d["name"], uuid.UUID(d["id"]), int(d["partitions"]), dict(d.get("configs", {})), bool(d.get("internal")))


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"topic name of {len(name)} characters is longer than {MAX_TOPIC_LENGTH}")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopic(f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'")


class ReplicaManager:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = Path(config.data_dir)
        self.topics: dict[str, TopicMeta] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}
        self._deleted_logs: list[PartitionLog] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        meta_file = self.data_dir / "topics.json"
        if meta_file.exists():
            for d in json.loads(meta_file.read_text())["topics"]:
                meta = TopicMeta.from_json(d)
                self.topics[meta.name] = meta
                self._by_id[meta.topic_id] = meta
        now = self.clock.now_ms()
        for meta in self.topics.values():
            for p in range(meta.num_partitions):
                self._open_partition(meta, p, now)
        self._remove_orphans()

    def close(self) -> None:
        for part in self.partitions.values():
            part.close()
        self.partitions.clear()

    def _open_partition(self, meta: TopicMeta, p: int, now_ms: int) -> Partition:
        tp = TopicPartition(meta.name, p)
        cfg = topic_config.log_config(self.config, meta.configs)
        part = Partition.open(tp, self.data_dir / f"{meta.name}-{p}", cfg, now_ms)
        self.partitions[tp] = part
        return part

    def _remove_orphans(self) -> None:
        for child in self.data_dir.iterdir():
            if not child.is_dir() or "-" not in child.name:
                continue
            topic, _, p = child.name.rpartition("-")
            if not p.isdigit():
                continue
            meta = self.topics.get(topic)
            if meta is None or int(p) >= meta.num_partitions:
                log.warning("removing partition directory %s of no known topic", child)
                shutil.rmtree(child, ignore_errors=True)

    def _persist(self) -> None:
        doc = {"version": 1, "topics": [m.to_json() for m in self.topics.values()]}
        write_atomically(self.data_dir / "topics.json", json.dumps(doc, indent=1).encode())

    # -- topics ------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicMeta:
        """Create a topic. Raises TopicAlreadyExists, InvalidTopic, InvalidPartitions,
        InvalidReplicationFactor, InvalidConfig."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(f"number of partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}")
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if replication_factor != 1:
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} is larger than the 1 available broker"
            )
        clean = topic_config.validate_topic_configs(configs or {})
        meta = TopicMeta(name, uuid.uuid4(), num_partitions, clean, internal)
        if validate_only:
            return meta
        self.topics[name] = meta
        self._by_id[meta.topic_id] = meta
        try:
            self._persist()
            now = self.clock.now_ms()
            for p in range(num_partitions):
                self._open_partition(meta, p, now)
        except (OSError, KafkaStorageError) as exc:
            # Out of descriptors or disk: undo, so the topic is either fully there or absent.
            log.error("creating topic %s failed: %s; rolling back", name, exc)
            self._undo_create(meta)
            raise KafkaStorageError(f"cannot create topic {name!r}: {exc}") from None
        log.info("created topic %s with %d partitions", name, num_partitions)
        return meta

    def _undo_create(self, meta: TopicMeta) -> None:
        """Remove a topic whose creation failed midway: close what was opened (no client has
        seen it, so descriptors are released at once, not after file.delete.delay.ms), remove
        its directories, and write topics.json without it."""
        for p in range(meta.num_partitions):
            part = self.partitions.pop(TopicPartition(meta.name, p), None)
            if part is not None:
                try:
                    part.close()
                except (OSError, KafkaStorageError):
                    log.exception("closing %s-%d while rolling back failed", meta.name, p)
            shutil.rmtree(self.data_dir / f"{meta.name}-{p}", ignore_errors=True)
        self.topics.pop(meta.name, None)
        self._by_id.pop(meta.topic_id, None)
        try:
            self._persist()
        except OSError:
            log.exception("writing topics.json while rolling back topic %s failed", meta.name)

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicMeta:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``) unless it
        exists; an existing one keeps its partition count (changing it would move every key)."""
        meta = self.topics.get(name)
        if meta is not None:
            return meta
        return self.create_topic(name, num_partitions, 1, configs, internal=True)

    def delete_topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        del self.topics[name]
        self._by_id.pop(meta.topic_id, None)
        self._persist()
        for p in range(meta.num_partitions):
            part = self.partitions.pop(TopicPartition(name, p), None)
            if part is not None:
                part.wake_waiters()
                # Files are renamed now and removed after file.delete.delay.ms, so a fetch that
                # is still sending from them never reads a reused file descriptor.
                part.log.delete(self.clock.now_ms())
                self._deleted_logs.append(part.log)
        log.info("deleted topic %s", name)
        return meta

    def topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return meta

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def partition(self, topic: str, index: int) -> Partition:
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None:
            raise UnknownTopicOrPartition(f"partition {topic}-{index} does not exist on this broker")
        return part

    # -- housekeeping --------------------------------------------------------------------------

    def enforce_retention(self) -> int:
        now = self.clock.now_ms()
        deleted = 0
        for part in list(self.partitions.values()):
            deleted += part.enforce_retention(now)
        self._deleted_logs = [plog for plog in self._deleted_logs if plog.cleanup_deleted(now) >= 0 and plog.pending_deletes]
        return deleted

    def expire_producers(self) -> int:
        """Forget idle producer ids (producer.id.expiration.ms, KIP-854)."""
        now = self.clock.now_ms()
        return sum(len(p.producers.expire(now, self.config.producer_id_expiration_ms)) for p in self.partitions.values())

    def flush(self) -> None:
        for part in self.partitions.values():
            part.log.flush()
