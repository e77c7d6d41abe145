"""The embedded membership (issue 27): this node is the cluster.

Its stores are files of the data directory: the topics and their configs in ``topics.json``
(broker/replica_manager.py), the dynamic broker configs in ``dynamic-broker-configs.json``, the
ACLs in ``acls.json`` (acl/file_store.py), the SCRAM credentials in ``scram-credentials.json``
(broker/auth/credentials.py), the producer-id blocks in ``producer_id_block.json``
(coordinator/producer_ids.py) and the cluster id in ``meta.properties``. Every change is written
atomically before it is answered.

This node is the only broker, the controller, and every partition's leader at epoch 0: an
election has nothing to do, and a NOT_LEADER answer has no other broker to name. What the
coordinators need of the mode is built here and handed to them: the share-group state (KIP-932)
is this node's ``__share_group_state`` (``LogSharePersister``) and every share group's members
are here (``LocalShareMembers``), no offsets are committed outside the Kafka protocol
(``NoInbox``), every transactional id is coordinated here (``LocalOnly``).
"""

from __future__ import annotations

import base64
import logging
import uuid
from pathlib import Path
from typing import Callable, Mapping, Sequence

from oncelog.broker.auth.acls import AclService
from oncelog.broker.auth.credentials import CredentialFile, UserCredentials
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.broker.configuration.group_config import FILE_NAME as GROUP_CONFIGS_FILE
from oncelog.broker.configuration.group_config import FileGroupConfigs, GroupConfigs
from oncelog.broker.coordinators.offset_inbox import NoInbox
from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
from oncelog.broker.coordinators.share_members import LocalShareMembers
from oncelog.broker.coordinators.share_persister import LogSharePersister
from oncelog.broker.partitions.markers import LocalMarkerWriter, MarkerWriter
from oncelog.broker.membership.interface import Election, Node
from oncelog.broker.partitions.replica_manager import NewTopic, ReplicaManager, TopicMeta
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC, TransactionCoordinator
from oncelog.broker.coordinators.txn_remote import LocalOnly
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.diskless import topic_rules
from oncelog.protocol.errors import KafkaError
from oncelog.storage.engines.local import cleaner
from oncelog.atomic import write_atomically
from oncelog.clock import Clock
from oncelog.types import TopicPartition

__all__ = ["EmbeddedConfigs", "EmbeddedMembership", "EmbeddedTopics"]

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


class EmbeddedTopics:
    """``TopicStore`` on topics.json (``ReplicaManager``)."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    async def create(self, new: Sequence[NewTopic], *, validate_only: bool = False) -> list[TopicMeta | KafkaError]:
        """One result per request, in order; a diskless topic (issue 29) is refused here: it
        needs cluster mode."""
        refused: dict[int, KafkaError] = {}
        for i, t in enumerate(new):
            try:
                topic_rules.check_new_topic(t.name, t.configs, cluster_mode=False, storage_url=None, internal=t.internal)
            except KafkaError as exc:
                refused[i] = exc
        if not refused:
            return self._replicas.create_topics(new, validate_only=validate_only)
        made = iter(self._replicas.create_topics([t for i, t in enumerate(new) if i not in refused],
                                                 validate_only=validate_only))
        return [refused[i] if i in refused else next(made) for i in range(len(new))]

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        self._replicas.add_partitions(name, count, validate_only=validate_only)

    async def delete(self, name: str) -> None:
        self._replicas.delete_topic(name)


class EmbeddedConfigs:
    """``ConfigStore`` on topics.json and dynamic-broker-configs.json (``ReplicaManager``)."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._replicas.set_topic_configs(name, configs)

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        self._replicas.set_broker_configs(scope, configs)


class EmbeddedMembership:
    """``Membership`` of a single node (see the module docstring). ``address_of(listener)``:
    this broker's advertised (host, port) on that listener."""

    mode = "embedded"
    pipeline_produce = False  # appends complete at the call: nothing to overlap

    def __init__(self, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 address_of: Callable[[str], tuple[str, int]]) -> None:
        self._config = config
        self._replicas = replicas
        self._address_of = address_of
        self._data_dir = Path(config.data_dir)
        self.node_id = config.node_id
        self.cluster_id = ""
        self.topics = EmbeddedTopics(replicas)
        self.configs = EmbeddedConfigs(replicas)
        self.users = UserCredentials(CredentialFile(self._data_dir))
        self.producer_ids = ProducerIdManager(self._data_dir / "producer_id_block.json")
        self.acls: AclService | None = None
        self.internal_partitions = {OFFSETS_TOPIC: config.offsets_topic_num_partitions,
                                    TXN_TOPIC: config.transaction_state_log_num_partitions}
        self.coordinator_epoch = 0
        self.transaction_remote = LocalOnly()  # every transactional id is coordinated here
        self.offset_inbox = NoInbox()  # offsets are committed through the Kafka protocol only
        #: the groups' consumer group configs (KIP-848): the data dir's group-configs.json
        self.group_configs = GroupConfigs(FileGroupConfigs(self._data_dir / GROUP_CONFIGS_FILE))
        self.share_persister = LogSharePersister(replicas, clock)  # __share_group_state

    # -- Metadata ---------------------------------------------------------------------------

    def nodes(self, listener: str) -> list[Node]:
        return [Node(self.node_id, *self._address_of(listener), None)]

    def node(self, node_id: int, listener: str) -> Node | None:
        return Node(node_id, *self._address_of(listener), None) if node_id == self.node_id else None

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        return self.node_id, 0

    def leader_hint(self, tp: TopicPartition) -> tuple[int, int] | None:
        return None

    def controller_id(self) -> int:
        return self.node_id

    async def elect_preferred(self) -> Election:
        return Election("the partition's only replica leads it")

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """The cluster id, the ACLs (before listening: no request is ever unchecked), then every
        log recovered and opened."""
        data_dir = self._data_dir
        self.cluster_id = _load_or_create_cluster_id(data_dir)
        self.acls = AclService.for_config(self._config)
        cleaner.recover(data_dir)  # finish or undo a compaction interrupted by a crash
        self._replicas.open()
        epoch_file = data_dir / "transaction_coordinator_epoch"
        self.coordinator_epoch = int(epoch_file.read_text()) + 1 if epoch_file.exists() else 0
        write_atomically(epoch_file, str(self.coordinator_epoch).encode())

    def marker_writer(self, groups: GroupCoordinator) -> MarkerWriter:
        return LocalMarkerWriter(self._replicas, groups)

    def share_members(self, groups: GroupCoordinator) -> LocalShareMembers:
        return LocalShareMembers()

    async def start_coordinators(self, groups: GroupCoordinator, transactions: TransactionCoordinator,
                                 shares: ShareCoordinator) -> None:
        """Create ``__consumer_offsets`` and load it in the background (and
        ``__share_group_state`` when it exists); load ``__transaction_state`` now (every
        transaction left between states is finished first, R19)."""
        await groups.configs.refresh()
        groups.start()
        shares.start()
        loaded = await transactions.load()
        log.info("transaction coordinator loaded %d transactional id(s), coordinator epoch %d", loaded,
                 self.coordinator_epoch)

    async def join(self, listeners: Mapping[str, tuple[str, int]], host: str, port: int) -> None:
        """Nothing to join."""

    async def stop_coordinators(self) -> None:
        """Nothing writes through the coordinators from outside."""

    def fence_if_lease_lapsed(self) -> None:
        """No lease: this node is the cluster."""

    async def close(self) -> None:
        self.users.close()
