"""Membership and metadata (issues 15, 27): who the brokers are, who leads each partition, and
where topics, configs, ACLs, SCRAM credentials and producer-id blocks are kept.

ONE interface (``interface.py``: ``Metadata``, ``Membership`` and the store Protocols
``TopicStore``, ``ConfigStore``, ``AclStore``, ``CredentialService``, ``ProducerIdSource``) with two
implementations: ``embedded.py`` (this node is the cluster: topics.json, the data dir's
credential/ACL/config files, local producer-id blocks) and ``postgres.py`` (the cluster on a
PostgreSQL store). The broker's start sequence, the dispatcher and the handlers are written once
against the interface; ``membership_for`` is the one place that picks an implementation.

The mode is decided here, once: each implementation also builds what the coordinators need
that differs between the modes (the transaction coordinator's remote side, the group
coordinator's offset inbox, the share coordinator's persister and members, the marker writer)
and the broker hands it to their constructors.

The PostgreSQL implementation's parts: registration and the cluster view
(``cluster_member.py``, ``cluster_parts.py``: the store connections, the group committers, the
diskless parts and the leader tracker, partitions/leader_tracker.py), the store-backed
credentials (``cluster_credentials.py``) and requests to the other brokers (``peer_client.py``).
They need psycopg (the 'cluster' extra): nothing imports them until a broker starts with a store.
What is not membership lives where its concern is: the database outbox and inbox in
broker/database/, opening the partitions led here in broker/partitions/, asking a share group's
coordinator for its members in broker/coordinators/.

May import: oncelog's pure layers and ``oncelog.cluster`` (the stores), the root's ``context``,
``routes`` and ``periodic``, broker/configuration, broker/auth, broker/partitions,
broker/coordinators and broker/database. The broker (root), handlers and observability import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from oncelog.broker.membership.interface import (
    AclStore,
    ConfigStore,
    CredentialService,
    Election,
    Membership,
    Metadata,
    Node,
    ProducerIdSource,
    TopicStore,
)

if TYPE_CHECKING:
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.broker.membership.peer_client import PeerSecurity
    from oncelog.broker.partitions.replica_manager import ReplicaManager
    from oncelog.clock import Clock

__all__ = ["AclStore", "ConfigStore", "CredentialService", "Election", "Membership", "Metadata", "Node",
           "ProducerIdSource", "TopicStore", "membership_for"]


def membership_for(config: "BrokerConfig", clock: "Clock", replicas: "ReplicaManager", store: str | None, *,
                   address_of: Callable[[str], tuple[str, int]],
                   inter_broker: Callable[[], "tuple[str, PeerSecurity]"]) -> Membership:
    """The membership of a broker: on the PostgreSQL cluster at ``store`` (a URL), else embedded.

    ``address_of(listener name)``: this broker's advertised (host, port) on that listener, once
    listening. ``inter_broker()``: the inter-broker listener's name and how to log in to the
    peers there (cluster mode; called at start, so a bad setting fails the start)."""
    if store:
        from oncelog.broker.membership.postgres import StoreMembership  # psycopg: the 'cluster' extra

        return StoreMembership(store, config, clock, replicas, inter_broker)
    from oncelog.broker.membership.embedded import EmbeddedMembership

    return EmbeddedMembership(config, clock, replicas, address_of)
