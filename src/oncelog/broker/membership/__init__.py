"""Cluster membership and metadata (issue 27): who the brokers are, who leads each partition, and
where topics, configs, ACLs, SCRAM credentials and producer-id blocks are kept.

This package owns ONE interface (``interface.py``: ``Membership`` and the store Protocols
``TopicStore``, ``ConfigStore``, ``AclStore``, ``CredentialService``, ``ProducerIdSource``) and its
two implementations: ``embedded.py`` (this node is the cluster: topics.json, the data-dir files,
local producer-id blocks) and ``postgres.py`` (the cluster on PostgreSQL: the glue of
broker/cluster_member.py, cluster_parts.py, cluster_credentials.py over cluster/). The broker's
start sequence, the dispatcher and the handlers are written once against the interface; the one
place that picks an implementation is ``membership_for``.

May import: the broker's configuration and replica manager, the coordinator runtimes' marker
writers, broker/auth, acl/, coordinator/ and (postgres.py only, lazily: psycopg is the 'cluster'
extra) cluster/ and the broker's cluster glue. Imported by: broker.py, context.py (types only)
and the handlers (types and ``Node``).
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
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.peer_client import PeerSecurity
    from oncelog.broker.replica_manager import ReplicaManager
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

    return EmbeddedMembership(config, replicas, address_of)
