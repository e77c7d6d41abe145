"""What observability reads of a broker: ``ObservedBroker``, the small Protocol that the observer
(``observe.take``), the metrics (``metrics.py``) and the console (``oncelog.console``) are typed
against instead of the concrete ``Broker`` (which imports them all to build them: typing them
against it made import circles). ``broker.Broker`` provides every member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
    from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
    from oncelog.broker.coordinators.transaction_coordinator import TransactionCoordinator
    from oncelog.broker.membership.interface import Membership
    from oncelog.broker.partitions.replica_manager import ReplicaManager
    from oncelog.clock import Clock

__all__ = ["ObservedBroker", "ObservedListener", "ObservedServer"]


class ObservedListener(Protocol):
    """A listener as the snapshot names it (``network/listeners.Listener``)."""

    @property
    def name(self) -> str: ...

    @property
    def protocol(self) -> str: ...


class ObservedServer(Protocol):
    """One listener's server as observability reads it (``network/server.Server``)."""

    name: str
    host: str
    port: int

    @property
    def connection_count(self) -> int: ...


class ObservedBroker(Protocol):
    """The broker parts observability reads (and never changes), on the event loop."""

    config: BrokerConfig
    clock: Clock
    node_id: int
    replicas: ReplicaManager
    #: the coordinators are set once the broker started (a snapshot taken before leaves them out)
    groups: GroupCoordinator
    shares: ShareCoordinator
    transactions: TransactionCoordinator
    membership: Membership
    #: the primary listener's server (the console's bootstrap address)
    server: ObservedServer

    @property
    def servers(self) -> Sequence[ObservedServer]: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def listener_name(self) -> str: ...

    def bound_listeners(self) -> Sequence[tuple[ObservedListener, str, int]]:
        """(listener, bound host, bound port) of every listener."""
        ...
