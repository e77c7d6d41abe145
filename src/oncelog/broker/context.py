"""What a request handler may use, and what it knows of the client asking.

``BrokerContext`` names exactly the broker's parts a handler reaches: settings, clock, identity,
the partitions (``replicas``), the two coordinators, producer ids, the advertised address and
the advertised API versions. ``Broker`` provides them; handlers are typed against this protocol,
never against the broker class, so nothing below the entrance imports the broker.

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
    from oncelog.broker.auth.credentials import UserCredentials
    from oncelog.broker.membership.cluster_credentials import StoreUserCredentials
    from oncelog.broker.auth.acls import AclService
    from oncelog.broker.membership.cluster_member import ClusterMember
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
    from oncelog.broker.partitions.replica_manager import ReplicaManager
    from oncelog.broker.coordinators.transaction_coordinator import TransactionCoordinator
    from oncelog.clock import Clock
    from oncelog.coordinator.producer_ids import ProducerIdManager

__all__ = ["BrokerContext", "Client", "CloseConnection", "Handler"]


class BrokerContext(Protocol):
    config: "BrokerConfig"
    clock: "Clock"
    node_id: int
    cluster_id: str
    replicas: "ReplicaManager"
    groups: "GroupCoordinator"
    transactions: "TransactionCoordinator"
    producer_ids: "ProducerIdManager"
    #: cluster mode (issue 15): the broker's membership and view of the store; None when embedded
    cluster: "ClusterMember | None"
    #: issue 18: the SCRAM credentials (AlterUserScramCredentials / Describe..., SASL logins)
    users: "UserCredentials | StoreUserCredentials"
    #: issue 18: the ACLs and their authorizer; None when ``authorizer.class.name`` is empty (everything allowed)
    acls: "AclService | None"

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
