"""Dynamic broker configs in the store (AlterConfigs / IncrementalAlterConfigs on a BROKER
resource, in cluster mode).

One row per resource of ``oncelog_broker_config``: ``""`` is the cluster-wide default that every
broker applies (Kafka's ``--entity-default``), ``"<node id>"`` one broker's own values over it.
``set_configs`` replaces one resource's whole set and notifies ``oncelog_metadata`` in the same
transaction, so every broker reloads its view (cluster/view.py reads the rows with the rest of
the metadata) and applies the new values to its partitions live; a broker that misses the
notification sees them at its next poll.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["load_all", "set_configs"]


def load_all(conn: Any) -> dict[str, dict[str, str]]:
    """resource ("" or a node id) -> its configs; resources without any are absent."""
    rows = conn.execute("SELECT resource, configs FROM oncelog_broker_config").fetchall()
    return {resource: {str(k): str(v) for k, v in configs.items()} for resource, configs in rows if configs}


def set_configs(conn: Any, resource: str, configs: Mapping[str, str]) -> None:
    """Make ``configs`` the whole set of ``resource`` and notify every broker. Commits."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO oncelog_broker_config (resource, configs) VALUES (%s, %s::jsonb) "
            "ON CONFLICT (resource) DO UPDATE SET configs = EXCLUDED.configs",
            (resource, json.dumps(dict(configs))))
        conn.execute("SELECT pg_notify('oncelog_metadata', '')")
