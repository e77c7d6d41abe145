"""Cluster membership (issue 15): how this broker is one of several on a PostgreSQL store —
registration and the cluster view (``cluster_member.py``, ``cluster_parts.py``), leading the
partitions the store assigns it (``leader_tracker.py``), the store-backed credentials
(``cluster_credentials.py``), requests to the other brokers (``peer_client.py``), the
database outbox's drain (``outbox_drainer.py``) and the group coordinator's side of the
database inbox (``inbox.py``).

May import: oncelog's pure layers and ``oncelog.cluster`` (the stores), the root's ``context``,
``routes`` and ``periodic``, broker/configuration, broker/auth, broker/partitions and
broker/coordinators. The broker (root), handlers and observability import it.
"""
