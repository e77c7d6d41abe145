"""The membership/metadata interface (issue 27): what the broker's start sequence, dispatcher and
handlers know of "the cluster", whether it is this one node (``embedded.py``) or the brokers
sharing a PostgreSQL store (``postgres.py``).

Two levels:

* ``Metadata``: what a handler may ask: the brokers (``nodes``, ``node``), a partition's leader
  and leader epoch (``leader``), the leader a NOT_LEADER answer may name (``leader_hint``), the
  controller id, and a preferred leader election. Embedded, this node leads everything at
  epoch 0 and is the controller.
* ``Membership``: ``Metadata`` plus the stores and the lifecycle the broker drives, in this
  order: ``open`` (before anything listens), ``marker_writer``, ``share_members``,
  ``start_coordinators``, then, once listening, ``join``; at stop ``stop_coordinators`` (before
  the coordinators stop), then ``close`` (also after a failed start).

The mode is decided once, here: after ``open`` the membership holds what the coordinators need
of it, which the broker hands to their constructors (nothing is set on a coordinator afterwards,
and nothing above asks which mode it runs in):

==================  ===========================================  ================================
collaborator        embedded                                     PostgreSQL
==================  ===========================================  ================================
transaction_remote  ``coordinators/txn_remote.LocalOnly``        ``partitions/txn_verifier.
                                                                 RemoteVerifier``
offset_inbox        ``coordinators/offset_inbox.NoInbox``        ``database/inbox.DatabaseInbox``
                                                                 (``NoInbox`` without the schema)
group_configs       ``configuration/group_config.GroupConfigs``  the same, on
                    on ``FileGroupConfigs`` (group-configs.json) ``postgres.StoreGroupConfigs``
share_persister     ``coordinators/share_persister.              ``coordinators/
                    LogSharePersister`` (__share_group_state)    share_store_persister.
                                                                 StoreSharePersister``
share_members()     ``coordinators/share_members.                ``coordinators/share_members.
                    LocalShareMembers``                          RemoteShareMembers``
marker_writer()     ``partitions/markers.LocalMarkerWriter``     ``partitions/markers.
                                                                 ClusterMarkerWriter``
==================  ===========================================  ================================

Each store is a Protocol of its own, implemented embedded and on PostgreSQL:

==================  ===============================================  ============================
store               embedded                                         PostgreSQL
==================  ===============================================  ============================
TopicStore          ``ReplicaManager`` (topics.json)                 ``cluster/topics.py``
ConfigStore         topics.json, dynamic-broker-configs.json         ``cluster/topics.py``,
                                                                     ``cluster/broker_configs.py``
AclStore            ``acl/file_store.AclFileStore`` (acls.json)      ``cluster/acls.StoreAcls``
(auth/acls.py)
CredentialService   ``auth/credentials.UserCredentials``             ``cluster_credentials.
                    (scram-credentials.json)                         StoreUserCredentials``
ProducerIdSource    ``coordinator/producer_ids.ProducerIdManager``   ``cluster/producer_ids.
                    (producer_id_block.json)                         StoreProducerIds``
==================  ===============================================  ============================

The implementations satisfy the Protocols structurally (cluster/ and acl/ import nothing of the
broker); tests/unit/test_membership_interface.py holds each one to its Protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence, runtime_checkable

from oncelog.broker.auth.acls import AclStore
from oncelog.coordinator.producer_ids import ProducerIdSource
from oncelog.protocol.errors import ErrorCode
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.auth.acls import AclService
    from oncelog.broker.auth.credentials import CredentialStore
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
    from oncelog.broker.configuration.group_config import GroupConfigs
    from oncelog.broker.coordinators.offset_inbox import OffsetInbox
    from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
    from oncelog.broker.coordinators.share_members import ShareMembers
    from oncelog.broker.coordinators.share_persister import SharePersister
    from oncelog.broker.partitions.markers import MarkerWriter
    from oncelog.broker.partitions.replica_manager import NewTopic, TopicMeta
    from oncelog.broker.coordinators.transaction_coordinator import TransactionCoordinator
    from oncelog.broker.coordinators.txn_remote import TxnRemote
    from oncelog.protocol.errors import KafkaError

__all__ = ["AclStore", "ConfigStore", "CredentialService", "Election", "Membership", "Metadata", "Node",
           "ProducerIdSource", "TopicStore"]


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as a client is told of it: its address on the listener the client came on."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class Election:
    """What a preferred leader election did (ElectLeaders).

    ``moved``: the partitions whose leader it changed, in the metadata's order; ``led``: the
    partitions with a live leader afterwards (None: every partition has one); ``why_not_needed``:
    the message of ELECTION_NOT_NEEDED."""

    why_not_needed: str
    moved: tuple[TopicPartition, ...] = ()
    led: frozenset[TopicPartition] | None = None

    def outcome(self, tp: TopicPartition) -> tuple[ErrorCode, str | None]:
        """The answer for an existing partition ``tp``."""
        if self.led is not None and tp not in self.led:
            return ErrorCode.preferred_leader_not_available, f"no live broker can lead {tp.topic}-{tp.partition}"
        if tp in self.moved:
            return ErrorCode.none, None
        return ErrorCode.election_not_needed, self.why_not_needed


class Metadata(Protocol):
    """What a handler may ask of the cluster (see the module docstring)."""

    def nodes(self, listener: str) -> list[Node]:
        """The live brokers, each with its address on ``listener``."""
        ...

    def node(self, node_id: int, listener: str) -> Node | None:
        """Live broker ``node_id`` with its address on ``listener``; None when it is not live."""
        ...

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        """(leader, leader epoch) of partition ``tp`` of a known topic; (-1, -1) while it has no
        live leader."""
        ...

    def leader_hint(self, tp: TopicPartition) -> tuple[int, int] | None:
        """The (leader, epoch) a NOT_LEADER_OR_FOLLOWER answer names (KIP-951), so the client
        goes there without a metadata round trip; None when there is none to name (embedded:
        there is no other broker)."""
        ...

    def controller_id(self) -> int:
        """The controller id clients are told: the live broker with the lowest id (-1: none)."""
        ...

    async def elect_preferred(self) -> Election:
        """Move leaders where the placement wants them. Raises KafkaError (the store is out of
        reach)."""
        ...


class TopicStore(Protocol):
    """Where topics are created, grown and deleted. Every method validates completely before
    it writes (nothing is written with ``validate_only``) and raises the topic's KafkaError."""

    async def create(self, new: Sequence["NewTopic"], *, validate_only: bool = False
                     ) -> list["TopicMeta | KafkaError"]:
        """One result per entry of ``new``, in order."""
        ...

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None: ...

    async def delete(self, name: str) -> None: ...


class ConfigStore(Protocol):
    """Where the dynamic configs are kept: a topic's (validated) configs, and the broker's
    dynamic configs of one scope ("" the cluster default, else a node id's)."""

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None: ...


@runtime_checkable
class CredentialService(Protocol):
    """The SCRAM credentials: ``store`` is what SASL logins read at each exchange."""

    store: "CredentialStore"

    async def apply(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
                    ) -> dict[str, tuple[ErrorCode, str | None]]:
        """AlterUserScramCredentials: durable before it returns."""
        ...

    async def refresh(self) -> None:
        """Reload what another broker may have changed (embedded: nothing to do)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Membership(Metadata, Protocol):
    """``Metadata`` plus the stores and the lifecycle (see the module docstring)."""

    #: "embedded" or "cluster" (the console and the metrics say which)
    mode: str
    #: whether a connection's Produce requests are pipelined (broker/pipelining.py): where appends
    #: complete at a store's COMMIT (cluster mode), not at the call
    pipeline_produce: bool
    #: the cluster id (valid after ``open``)
    cluster_id: str
    topics: TopicStore
    configs: ConfigStore
    users: CredentialService
    #: valid after ``open``
    producer_ids: ProducerIdSource
    #: the ACL service (after ``open``); None when ``authorizer.class.name`` is empty
    acls: "AclService | None"
    #: (after ``open``) the partition counts of the internal topics the coordinators place keys by
    internal_partitions: Mapping[str, int]
    #: (after ``open``) the transaction coordinator's epoch: embedded, one more per start;
    #: cluster mode, each partition's leader epoch (so 0 here)
    coordinator_epoch: int
    #: (after ``open``) the transaction coordinators on other brokers, as the transaction
    #: coordinator reaches them: embedded ``LocalOnly`` (none), cluster mode ``RemoteVerifier``
    transaction_remote: "TxnRemote"
    #: (after ``open``) the group coordinator's offsets committed outside the Kafka protocol
    offset_inbox: "OffsetInbox"
    #: (after ``open``) the groups' own consumer group configs, kept in the data dir or the store
    group_configs: "GroupConfigs"
    #: (after ``open``) where share groups' state is durable
    share_persister: "SharePersister"

    async def open(self) -> None:
        """Before anything listens: recover and open what this node holds or reach the store,
        create the internal topics' metadata, load ACLs and credentials."""
        ...

    def marker_writer(self, groups: "GroupCoordinator") -> "MarkerWriter":
        """How the transaction coordinator writes its markers (to the partitions led here; in
        cluster mode also to the other brokers')."""
        ...

    def share_members(self, groups: "GroupCoordinator") -> "ShareMembers":
        """Where the share coordinator learns who a share group's members are (at its group
        coordinator: this broker, or in cluster mode possibly another)."""
        ...

    async def start_coordinators(self, groups: "GroupCoordinator", transactions: "TransactionCoordinator",
                                 shares: "ShareCoordinator") -> None:
        """Start the group, transaction and share-group coordinators: embedded, every internal
        partition is loaded now (before listening, R19) and the share state is this node's
        ``__share_group_state``; in cluster mode, internal partitions load as this broker is
        given their leadership, and the share state is the store's."""
        ...

    async def join(self, listeners: Mapping[str, tuple[str, int]], host: str, port: int) -> None:
        """Once listening (``listeners``: name -> advertised (host, port); ``host:port`` the
        primary listener's): become a member."""
        ...

    async def stop_coordinators(self) -> None:
        """At stop, before the coordinators stop: stop what writes through them (cluster mode:
        the database inbox's drains, issue 31; embedded: nothing)."""
        ...

    def fence_if_lease_lapsed(self) -> None:
        """Called before every request: a member whose lease ran out drops its leaderships
        before it answers anything from them (embedded: nothing to do)."""
        ...

    async def close(self) -> None:
        """Leave the cluster and close what ``open`` opened (best effort; also after a failed
        start)."""
        ...
