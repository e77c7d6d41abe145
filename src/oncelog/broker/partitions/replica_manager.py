"""The topics and partitions this broker holds, and their metadata on disk.

Theory of operation: the set of topics (name, topic id, partition count, topic configs) lives in
``<data-dir>/topics.json``, replaced atomically (write a temporary file, fsync, rename, fsync the
directory) on every change, so a crash leaves either the old or the new set. Each partition's
log lives in ``<data-dir>/<topic>-<partition>/``, with a ``partition.metadata`` file naming its
topic id (as Kafka's). Topics whose directories are missing get empty logs.

Data is never deleted on a guess (R22). On start, a partition directory that belongs to no
known topic (a delete interrupted by a crash, a topics.json restored from an old backup) is
renamed ``<dir>.<millis>-stray`` and kept, with a warning, as Kafka does with stray logs; if
topics.json itself is missing while partition directories exist, the topic list is rebuilt from
the directories (topic ids from ``partition.metadata``; configs are lost, so rebuilt topics keep
every record: ``retention.ms=-1``), and a warning says so. A topics.json that does not parse
stops the start with a clear message.

A creation is durable only once complete (issue 26 row 10): CreateTopics and CreatePartitions
open every new partition (directory, ``partition.metadata``, segment and indexes) first and
write topics.json last, so a SIGKILL in between leaves directories of no known topic, never a
topic whose partitions cannot be opened. On the next start such a directory whose log holds no
record (what an interrupted creation leaves) is removed with a warning; one with records is
set aside as a stray, as above. A start that cannot open the partitions topics.json names (out
of descriptors: a hard limit lowered below what the topics need) stops with one line saying
how many partitions it needs and which limit to raise, as Kafka stops when its log directory
fails to load.

A stored topic config that is no longer valid is ignored with an error line (its broker default
applies); a topic config is validated completely before anything is written, so a refused
CreateTopics leaves nothing behind. Many topics created at once (Metadata auto-creation,
CreateTopics with many topics) write topics.json once.

Single-threaded: called only from the broker's event loop.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from oncelog.broker.configuration import topic_config
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.dynamic_config import DynamicBrokerConfigs
from oncelog.broker.partitions.partition import Partition
from oncelog.clock import Clock
from oncelog.faults import CrashPoints
from oncelog.protocol.errors import (
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollower,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from oncelog.atomic import write_atomically
from oncelog.storage.engine import PartitionEngine
from oncelog.types import TopicPartition
from oncelog.internal_topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249
MAX_PARTITIONS = 10_000
_PARTITION_METADATA = "partition.metadata"


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: -1 partitions / replication factor mean the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] | None = None
    internal: bool = False


@dataclass
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    #: cluster mode: the configs as the store last had them (leader_tracker.py tells changes by them)
    store_configs: dict[str, str] | None = field(default=None, compare=False, repr=False)

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
        #: grows whenever a topic is added or removed or its partition count changes (the group
        #: coordinator's topic image is built again only then)
        self.topics_version = 0
        self.partitions: dict[TopicPartition, Partition] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}
        self._deleted_logs: list[PartitionEngine] = []
        #: cluster mode, until the first view of the store is applied (``set_topics``): no topic
        #: is known yet, and none may be called unknown (a peer would take it for deleted)
        self.awaiting_metadata = False
        #: the broker's dynamic configs (AlterConfigs on a BROKER resource), loaded by ``open``
        self.dynamic = DynamicBrokerConfigs(self.data_dir / "dynamic-broker-configs.json", config.node_id)
        #: called with ``dynamic`` whenever the dynamic broker configs are loaded or change (the
        #: broker's listeners adopt the connection limits; dynamic_kafka_configs.APPLIED)
        self.on_broker_configs: list[Callable[[DynamicBrokerConfigs], None]] = []
        #: fault injection (faults.py): ``create_topics.partition_opened`` fires once the first
        #: partition of a (not internal) topic being created is open, ``create_partitions.
        #: partition_opened`` once the first new partition of a growing topic is
        self.crash = CrashPoints()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.dynamic = DynamicBrokerConfigs.load(self.data_dir, self.config.node_id)
        self._broker_configs_changed()
        meta_file = self.data_dir / "topics.json"
        dirs = self._partition_dirs()
        if meta_file.exists():
            try:
                doc = json.loads(meta_file.read_text())
                metas = [TopicMeta.from_json(d) for d in doc["topics"]]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise KafkaStorageError(
                    f"{meta_file} is unreadable ({exc}); refusing to start rather than guess which "
                    f"partition directories are topics. Restore it from a backup, or move it away to "
                    f"rebuild the topic list from the partition directories."
                ) from None
        elif dirs:
            metas = self._rebuild_from_dirs(dirs)
        else:
            metas = []
        for meta in metas:
            meta.configs = topic_config.usable_topic_configs(self.config, meta.name, meta.configs)
            self.topics[meta.name] = meta
            self.topics_version += 1
            self._by_id[meta.topic_id] = meta
        now = self.clock.now_ms()
        needed = sum(m.num_partitions for m in self.topics.values())
        opened = 0
        for meta in self.topics.values():
            for p in range(meta.num_partitions):
                try:
                    self._open_partition(meta, p, now)
                except OSError as exc:
                    if exc.errno not in (errno.EMFILE, errno.ENFILE):
                        raise
                    self.close()
                    raise KafkaStorageError(
                        f"out of file descriptors after opening {opened} of the {needed} partitions of "
                        f"{meta_file} ({exc.strerror}, at {meta.name}-{p}): each partition keeps 3 open; "
                        f"raise the hard open-files limit (ulimit -Hn, LimitNOFILE=) above "
                        f"{3 * needed} + connections, or start with fewer topics"
                    ) from None
                opened += 1
        self._set_aside_strays(dirs, now)
        if not meta_file.exists():
            # Written even when empty: a later creation interrupted by a crash then leaves
            # directories of no known topic, never a data directory to rebuild a topic list from.
            self._persist()

    def _partition_dirs(self) -> dict[tuple[str, int], Path]:
        """Every ``<topic>-<partition>`` directory of the data directory."""
        found: dict[tuple[str, int], Path] = {}
        for child in self.data_dir.iterdir():
            topic, _, p = child.name.rpartition("-")
            if child.is_dir() and topic and p.isdigit() and _LEGAL_TOPIC.match(topic) and not child.name.endswith("-stray"):
                found[(topic, int(p))] = child
        return found

    def _rebuild_from_dirs(self, dirs: dict[tuple[str, int], Path]) -> list[TopicMeta]:
        counts: dict[str, int] = {}
        for topic, p in dirs:
            counts[topic] = max(counts.get(topic, 0), p + 1)
        metas = []
        for name, count in sorted(counts.items()):
            first_dir = next((path for (t, _p), path in sorted(dirs.items()) if t == name), None)
            topic_id = _read_topic_id(first_dir) or uuid.uuid4()
            internal = name in INTERNAL_TOPICS
            configs = {"cleanup.policy": "compact"} if internal else {"retention.ms": "-1", "retention.bytes": "-1"}
            metas.append(TopicMeta(name, topic_id, count, configs, internal))
        log.warning(
            "%s/topics.json is missing but %d partition directories exist: rebuilt %d topic(s) from them "
            "(%s). Their topic configs were lost; rebuilt topics keep every record (retention.ms=-1) "
            "until configured again.", self.data_dir, len(dirs), len(metas), ", ".join(m.name for m in metas[:20]),
        )
        return metas

    def _set_aside_strays(self, dirs: dict[tuple[str, int], Path], now_ms: int) -> None:
        for (topic, p), path in dirs.items():
            meta = self.topics.get(topic)
            if meta is not None and p < meta.num_partitions:
                continue
            if _holds_no_record(path):
                # What a creation interrupted by a crash leaves (topics.json is written last).
                log.warning("partition directory %s belongs to no known topic and holds no record (a topic "
                            "creation interrupted by a crash); removed", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            target = path.with_name(f"{path.name}.{now_ms}-stray")
            log.warning("partition directory %s belongs to no known topic; kept as %s (remove it by hand "
                        "once it is not needed)", path, target.name)
            try:
                path.rename(target)
            except OSError as exc:
                log.error("could not rename stray directory %s: %s", path, exc)

    def close(self) -> None:
        for part in self.partitions.values():
            part.close()
        self.partitions.clear()

    def _open_partition(self, meta: TopicMeta, p: int, now_ms: int) -> Partition:
        tp = TopicPartition(meta.name, p)
        cfg = self.log_config(meta)
        path = self.data_dir / f"{meta.name}-{p}"
        part = Partition.open(tp, path, cfg, now_ms)
        self.partitions[tp] = part
        _write_topic_id(path, meta.topic_id)
        return part

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
        """Create one topic (``create_topics``). Raises TopicAlreadyExists, InvalidTopic,
        InvalidPartitions, InvalidReplicationFactor, InvalidConfig, KafkaStorageError."""
        (result,) = self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, configs, internal)], validate_only=validate_only
        )
        if isinstance(result, KafkaError):
            raise result
        return result

    def create_topics(self, new: Sequence[NewTopic], *, validate_only: bool = False) -> list[TopicMeta | KafkaError]:
        """Create topics; one result per request, in order: the topic, or the error that refused
        it. Everything is validated before anything is written. Every new partition is opened
        first; topics.json is written last, once for the whole list, so a creation is durable
        only once complete (a crash before leaves directories that the next start removes). A
        topic whose partitions cannot be opened (out of descriptors or disk) is undone
        completely: each topic is either fully there or absent."""
        results: list[TopicMeta | KafkaError] = []
        valid: list[TopicMeta] = []
        for t in new:
            try:
                meta = self._new_topic_meta(t)
                if meta.name in self.topics or any(v.name == meta.name for v in valid):
                    raise TopicAlreadyExists(f"topic {meta.name!r} already exists")
            except KafkaError as exc:
                results.append(exc)
                continue
            results.append(meta)
            valid.append(meta)
        if validate_only or not valid:
            return results
        now = self.clock.now_ms()
        failed: dict[str, KafkaError] = {}
        opened: list[TopicMeta] = []
        for meta in valid:
            try:
                for p in range(meta.num_partitions):
                    self._open_partition(meta, p, now)
                    if p == 0 and not meta.internal:
                        self.crash.reached("create_topics.partition_opened")
            except (OSError, KafkaError) as exc:
                # Out of descriptors or disk: undo, so the topic is either fully there or absent.
                log.error("creating topic %s failed: %s; rolling back", meta.name, exc)
                self._close_created(meta)
                failed[meta.name] = KafkaStorageError(f"cannot create topic {meta.name!r}: {exc}")
                continue
            opened.append(meta)
        if opened:
            for meta in opened:
                self.topics[meta.name] = meta
                self._by_id[meta.topic_id] = meta
            self.topics_version += 1
            try:
                self._persist()  # last: from here on the topics are durable
            except OSError as exc:
                log.error("creating %d topic(s) failed: %s; rolling back", len(opened), exc)
                for meta in opened:
                    self._forget(meta)
                    self._close_created(meta)
                    failed[meta.name] = KafkaStorageError(f"cannot create topic {meta.name!r}: {exc}")
            else:
                for meta in opened:
                    log.info("created topic %s with %d partitions", meta.name, meta.num_partitions)
        return [failed.get(r.name, r) if isinstance(r, TopicMeta) else r for r in results]

    def _new_topic_meta(self, t: NewTopic, max_replication_factor: int = 1) -> TopicMeta:
        """Validate a topic request completely; raises InvalidTopic, InvalidPartitions,
        InvalidReplicationFactor, InvalidConfig."""
        validate_topic_name(t.name)
        num_partitions = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(f"number of partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}")
        rf = self.config.default_replication_factor if t.replication_factor == -1 else t.replication_factor
        if max_replication_factor == 1 and rf != 1:
            raise InvalidReplicationFactor(f"replication factor {rf} is larger than the 1 available broker")
        if not 1 <= rf <= max_replication_factor:
            raise InvalidReplicationFactor(f"replication factor {rf} is not between 1 and the {max_replication_factor} live brokers")
        clean = topic_config.validate_topic_configs(self.config, t.configs or {}, self.dynamic.layered())
        return TopicMeta(t.name, uuid.uuid4(), num_partitions, clean, t.internal)

    def _close_created(self, meta: TopicMeta) -> None:
        """Close and remove what was opened of a topic whose creation failed (no client has seen
        it, so descriptors are released at once, not after file.delete.delay.ms)."""
        for p in range(meta.num_partitions):
            part = self.partitions.pop(TopicPartition(meta.name, p), None)
            if part is not None:
                try:
                    part.close()
                except (OSError, KafkaStorageError):
                    log.exception("closing %s-%d while rolling back failed", meta.name, p)
            shutil.rmtree(self.data_dir / f"{meta.name}-{p}", ignore_errors=True)

    def _forget(self, meta: TopicMeta) -> None:
        self.topics.pop(meta.name, None)
        self.topics_version += 1
        self._by_id.pop(meta.topic_id, None)

    def check_partition_increase(self, name: str, count: int) -> TopicMeta:
        """The topic ``name`` if it may grow to ``count`` partitions (CreatePartitions); nothing
        is written. Raises UnknownTopicOrPartition, InvalidPartitions (not an increase, or more
        than MAX_PARTITIONS; Kafka's messages) or InvalidRequest (an internal topic: the group
        and transaction coordinators place every key by its partition count)."""
        meta = self.topic(name)
        if meta.internal or name in INTERNAL_TOPICS:
            raise InvalidRequest(f"topic {name!r} is internal: its partition count places every group's or "
                                 f"transactional id's state, and cannot change")
        if count == meta.num_partitions:
            raise InvalidPartitions(f"Topic already has {meta.num_partitions} partition(s).")
        if count < meta.num_partitions:
            raise InvalidPartitions(f"The topic {name} currently has {meta.num_partitions} partition(s); "
                                    f"{count} would not be an increase.")
        if count > MAX_PARTITIONS:
            raise InvalidPartitions(f"number of partitions must be at most {MAX_PARTITIONS}, got {count}")
        return meta

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> TopicMeta:
        """Grow the topic ``name`` to ``count`` partitions (embedded mode): the new partitions
        are opened first, then topics.json is written with the new count (so the growth is
        durable only once complete); if opening or writing fails (out of descriptors or disk)
        what was opened is closed and removed, so the topic keeps its old partitions only.
        Raises what ``check_partition_increase`` raises, KafkaStorageError."""
        meta = self.check_partition_increase(name, count)
        if validate_only:
            return meta
        old = meta.num_partitions
        now = self.clock.now_ms()
        try:
            for p in range(old, count):
                self._open_partition(meta, p, now)
                if p == old:
                    self.crash.reached("create_partitions.partition_opened")
            meta.num_partitions = count
            self.topics_version += 1
            self._persist()  # last: from here on the growth is durable
        except (OSError, KafkaError) as exc:
            log.error("growing topic %s to %d partitions failed: %s; rolling back", name, count, exc)
            meta.num_partitions = old
            self.topics_version += 1
            for p in range(old, count):
                part = self.partitions.pop(TopicPartition(name, p), None)
                if part is not None:
                    try:
                        part.close()
                    except (OSError, KafkaStorageError):
                        log.exception("closing %s-%d while rolling back failed", name, p)
                shutil.rmtree(self.data_dir / f"{name}-{p}", ignore_errors=True)
            raise KafkaStorageError(f"cannot grow topic {name!r}: {exc}") from None
        log.info("topic %s grown from %d to %d partitions", name, old, count)
        return meta

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicMeta:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``,
        ``__share_group_state``) unless it exists; an existing one keeps its partition count
        (changing it would move every key). A topic of that name the broker did not create as
        internal (a client's, from before the names were reserved) is never adopted: raises
        InvalidTopic, its records are never read as the coordinator's state."""
        meta = self.topics.get(name)
        if meta is not None and not meta.internal:
            raise InvalidTopic(f"topic {name} exists but the broker did not create it as internal (a client did): its "
                               f"records are not trusted; delete the topic to let the broker create its own")
        if meta is not None:
            return meta
        return self.create_topic(name, num_partitions, 1, configs, internal=True)

    def delete_topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        del self.topics[name]
        self._by_id.pop(meta.topic_id, None)
        self.topics_version += 1
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

    def set_topics(self, metas: Sequence[TopicMeta]) -> None:
        """Cluster mode: the topics as the store has them (nothing written locally)."""
        self.awaiting_metadata = False
        self.topics = {m.name: m for m in metas}
        self._by_id = {m.topic_id: m for m in metas}
        self.topics_version += 1

    def validate_new_topic(self, t: NewTopic, max_replication_factor: int = 1) -> TopicMeta:
        """A topic request validated completely (nothing written); raises InvalidTopic,
        InvalidPartitions, InvalidReplicationFactor, InvalidConfig."""
        return self._new_topic_meta(t, max_replication_factor)

    def topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return meta

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def exists(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is a partition of a known topic (led here or, in cluster mode, elsewhere)."""
        meta = self.topics.get(tp.topic)
        return meta is not None and 0 <= tp.partition < meta.num_partitions

    def partition(self, topic: str, index: int) -> Partition:
        """The partition this broker leads. Raises NotLeaderOrFollower for a partition of a
        known topic that is not open here (in cluster mode: another broker leads it; embedded,
        every partition of a known topic is open), UnknownTopicOrPartition otherwise."""
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None:
            meta = self.topics.get(topic)
            if self.awaiting_metadata:
                raise NotLeaderOrFollower(f"this broker (node {self.config.node_id}) has not loaded the cluster metadata yet")
            if meta is not None and 0 <= index < meta.num_partitions:
                raise NotLeaderOrFollower(f"this broker (node {self.config.node_id}) does not lead {topic}-{index}")
            raise UnknownTopicOrPartition(f"partition {topic}-{index} does not exist on this broker")
        return part

    # -- configs (AlterConfigs, IncrementalAlterConfigs) -----------------------------------------

    def log_config(self, meta: TopicMeta) -> "topic_config.LogConfig":
        """The LogConfig of ``meta``'s partitions: its configs over the broker's dynamic, static
        and default values. A combination that became unusable (a broker value changed under
        a topic value) falls back to the topic's configs over Kafka's defaults."""
        return topic_config.log_config(self.config, meta.configs, self.dynamic.layered())

    def validate_topic_configs(self, name: str, configs: dict[str, str]) -> dict[str, str]:
        """The complete new configs of topic ``name`` validated and normalised (nothing changed).
        Raises UnknownTopicOrPartition, InvalidConfig."""
        self.topic(name)
        return topic_config.validate_topic_configs(self.config, configs, self.dynamic.layered())

    def set_topic_configs(self, name: str, configs: dict[str, str], *, persist: bool = True) -> None:
        """Make ``configs`` (validated) the whole set of topic ``name``'s configs, durable in
        topics.json (embedded; cluster mode: the store, ``persist=False``), applied live to its
        open partitions. Raises UnknownTopicOrPartition, KafkaStorageError."""
        meta = self.topic(name)
        old = meta.configs
        meta.configs = dict(configs)
        if persist:
            try:
                self._persist()
            except OSError as exc:
                meta.configs = old
                raise KafkaStorageError(f"cannot write the configs of topic {name!r}: {exc}") from None
        self.refresh_log_configs([meta])

    def check_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        """Raise the KafkaError (InvalidConfig) of a topic whose log config would be unusable with
        ``configs`` as the whole dynamic set of ``scope``; nothing changes."""
        layers = self.dynamic.with_scope(scope, configs)
        for meta in self.topics.values():
            topic_config.log_config(self.config, meta.configs, layers)

    def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        """Embedded: make ``configs`` (validated, ``DynamicBrokerConfigs.validate``) the dynamic
        broker configs of ``scope`` ("default" or "node"), durable, applied live to every
        partition. Raises InvalidConfig (nothing changed), KafkaStorageError."""
        self.check_broker_configs(scope, configs)
        try:
            self.dynamic.replace(scope, configs)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write {self.dynamic.path}: {exc}") from None
        self.refresh_log_configs(list(self.topics.values()))
        self._broker_configs_changed()

    def adopt_broker_configs(self, default: dict[str, str], node: dict[str, str]) -> bool:
        """Cluster mode: the dynamic broker configs as the latest view of the store holds them,
        applied live to every open partition when they changed. Returns whether they did."""
        if not self.dynamic.adopt(default, node):
            return False
        self.refresh_log_configs(list(self.topics.values()))
        self._broker_configs_changed()
        return True

    def _broker_configs_changed(self) -> None:
        for listener in self.on_broker_configs:
            try:
                listener(self.dynamic)
            except Exception:  # one listener's failure never keeps the configs from the rest
                log.exception("bug: applying the dynamic broker configs failed")

    def refresh_log_configs(self, metas: Sequence[TopicMeta]) -> None:
        """Give the open partitions of ``metas`` their LogConfig as it is now."""
        for meta in metas:
            try:
                cfg = self.log_config(meta)
            except KafkaError as exc:
                log.error("topic %s: configs not applied (%s)", meta.name, exc)
                continue
            for p in range(meta.num_partitions):
                part = self.partitions.get(TopicPartition(meta.name, p))
                if part is not None and part.config != cfg:
                    part.set_config(cfg)

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
        expiration = int(self.dynamic.value("producer.id.expiration.ms") or self.config.producer_id_expiration_ms)
        return sum(len(p.producers.expire(now, expiration)) for p in self.partitions.values())

    def flush(self) -> None:
        for part in self.partitions.values():
            part.log.flush()


def _write_topic_id(path: Path, topic_id: uuid.UUID) -> None:
    """Record the topic id in the partition directory (Kafka's ``partition.metadata``), once.
    Not fsynced: it only helps to rebuild a lost topics.json, and costs nothing on the way."""
    f = path / _PARTITION_METADATA
    if not f.exists():
        try:
            f.write_text(f"version: 0\ntopic_id: {topic_id}\n")
        except OSError as exc:
            log.warning("could not write %s: %s", f, exc)


def _read_topic_id(path: Path | None) -> uuid.UUID | None:
    if path is None:
        return None
    try:
        for line in (path / _PARTITION_METADATA).read_text().splitlines():
            if line.startswith("topic_id:"):
                return uuid.UUID(line.split(":", 1)[1].strip())
    except (OSError, ValueError):
        pass
    return None


def _holds_no_record(path: Path) -> bool:
    """Whether the partition directory ``path`` holds no record: every segment file is empty
    (what a creation interrupted before topics.json names it leaves)."""
    try:
        return all(f.stat().st_size == 0 for f in path.glob("*.log"))
    except OSError:
        return False
