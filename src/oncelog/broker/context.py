"""What a request handler may use, and what it knows of the client asking.

``BrokerContext`` names exactly the broker's parts a handler reaches: settings, clock, identity,
the partitions (``replicas``), the two coordinators, and the membership's narrow services
(issue 27, broker/membership/): ``metadata`` (brokers, leaders, elections), ``topics`` and
``configs`` (where metadata changes are written), ``users`` (SCRAM credentials), ``acls`` and
``producer_ids``; then the advertised address and the advertised API versions. ``Broker``
provides them, and ``broker.ListenerContext`` for each further listener; handlers are typed
against this protocol, never against the broker class, so nothing below the entrance imports the
broker. Every member is declared here: nothing is found by ``getattr``. Embedded or cluster
mode is not a handler's question: the services answer for either.

``Client`` is the connection a request came on: its peer address (JoinGroup records it) and a
future resolved when it closes (a Fetch long poll stops waiting then).

``CloseConnection``: a handler's or the dispatcher's verdict that the connection must be closed
(a protocol violation, a failed acks=0 Produce); the server logs the reason and closes it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from oncelog.protocol.framing import Request

if TYPE_CHECKING:
    from oncelog.broker.auth.acls import AclService
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
    from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
    from oncelog.broker.coordinators.transaction_coordinator import TransactionCoordinator
    from oncelog.broker.membership import ConfigStore, CredentialService, Metadata, ProducerIdSource, TopicStore
    from oncelog.broker.request_stats import RequestStats
    from oncelog.broker.partitions.replica_manager import ReplicaManager
    from oncelog.clock import Clock
    from oncelog.protocol import records
    from oncelog.storage.config import LogConfig

__all__ = ["BrokerContext", "Client", "CloseConnection", "Handler", "SchemaIdCheck"]


class SchemaIdCheck(Protocol):
    """The produce path's check of a batch's schema ids (topics with
    confluent.key/value.schema.validation); oncelog/schema_registry/validation.py's SchemaIds."""

    async def validate(self, topic: str, batch: bytes | bytearray | memoryview, config: "LogConfig",
                       timestamps: "records.TimestampRule") -> "records.BatchHeader":
        """The batch validated as ``records.validate_produce_batch`` does, and its schema ids
        checked against the topic's subjects. Raises what that raises, and RecordErrors."""
        ...


class BrokerContext(Protocol):
    @property
    def config(self) -> "BrokerConfig": ...

    @property
    def clock(self) -> "Clock": ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def replicas(self) -> "ReplicaManager": ...

    @property
    def groups(self) -> "GroupCoordinator": ...

    @property
    def transactions(self) -> "TransactionCoordinator": ...

    @property
    def producer_ids(self) -> "ProducerIdSource": ...

    @property
    def metadata(self) -> "Metadata":
        """The brokers, each partition's leader, the controller, elections (issue 27)."""
        ...

    @property
    def topics(self) -> "TopicStore":
        """Where topics are created, grown and deleted (topics.json, or the cluster's store)."""
        ...

    @property
    def configs(self) -> "ConfigStore":
        """Where topic configs and dynamic broker configs are written."""
        ...

    @property
    def users(self) -> "CredentialService":
        """Issue 18: the SCRAM credentials (AlterUserScramCredentials / Describe..., SASL logins)."""
        ...

    @property
    def acls(self) -> "AclService | None":
        """Issue 18: the ACLs and their authorizer; None when ``authorizer.class.name`` is empty
        (everything allowed)."""
        ...

    @property
    def shares(self) -> "ShareCoordinator":
        """Issue 30: the share-group service (KIP-932); its state is this node's
        ``__share_group_state`` embedded, the store's in cluster mode."""
        ...

    @property
    def metrics(self) -> "RequestStats | None":
        """Issue 19: the request and per-topic traffic counters; None unless ``metrics.listen``
        is set."""
        ...

    @property
    def schema_ids(self) -> "SchemaIdCheck":
        """The schema registry's check of produced schema ids (topics with
        confluent.key/value.schema.validation; oncelog/schema_registry/validation.py)."""
        ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def advertised_port(self) -> int: ...

    @property
    def listener_name(self) -> str:
        """The listener the request came on (issue 18): other brokers are named by their
        endpoint of the same listener."""
        ...

    def advertised_versions(self) -> dict[int, tuple[int, int]]: ...


@dataclass(frozen=True, slots=True)
class Client:
    peer: str  # "host:port"
    closed: "asyncio.Future[None]"
    #: the authenticated principal (issue 18): "User:ANONYMOUS" on PLAINTEXT, else from SASL or the TLS certificate
    principal: str = "User:ANONYMOUS"

    @property
    def host(self) -> str:
        return self.peer.rpartition(":")[0] if ":" in self.peer else self.peer


class CloseConnection(Exception):
    """The request cannot be answered; the connection must be closed (after logging why)."""


#: ``async def handle(broker, request, client) -> response body`` (None: no response is due).
Handler = Callable[[BrokerContext, Request, Client], Awaitable[Any]]
