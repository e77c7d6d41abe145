"""Consumer group configs in the store (IncrementalAlterConfigs on a GROUP resource, in cluster
mode; broker/configuration/group_config.py says which configs and what they do).

One row of ``oncelog_group_config`` per group with configs of its own, and one change counter
(``oncelog_group_config_version``, one row). ``set_configs`` replaces a group's whole set (or
deletes its row), moves the counter and notifies ``oncelog_metadata`` in one transaction, so
every broker polls at once; after each poll a broker calls ``load_if_changed``, which reads
only the counter unless it moved (then every row: the group coordinators of all brokers know
every group's configs, as Kafka's brokers hold them in their metadata). A broker that missed
the notification sees the change at its next poll.

Synchronous, on a psycopg connection (the membership's control thread runs it).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["DDL", "load_if_changed", "set_configs"]

DDL = """
CREATE TABLE IF NOT EXISTS oncelog_group_config (
    group_id text  PRIMARY KEY,
    configs  jsonb NOT NULL
);
CREATE TABLE IF NOT EXISTS oncelog_group_config_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
"""


def set_configs(conn: Any, group_id: str, configs: Mapping[str, str]) -> None:
    """Make ``configs`` the whole set of the group's configs (none: its row goes), move the
    change counter and notify every broker. Commits."""
    with conn.transaction():
        if configs:
            conn.execute("INSERT INTO oncelog_group_config (group_id, configs) VALUES (%s, %s::jsonb) "
                         "ON CONFLICT (group_id) DO UPDATE SET configs = EXCLUDED.configs",
                         (group_id, json.dumps(dict(configs))))
        else:
            conn.execute("DELETE FROM oncelog_group_config WHERE group_id = %s", (group_id,))
        conn.execute("INSERT INTO oncelog_group_config_version (one, version) VALUES (true, 1) "
                     "ON CONFLICT (one) DO UPDATE SET version = oncelog_group_config_version.version + 1")
        conn.execute("SELECT pg_notify('oncelog_metadata', 'group-configs')")


def load_if_changed(conn: Any, version: int | None) -> tuple[int, dict[str, dict[str, str]] | None]:
    """(the change counter, every group's configs), or (the counter, None) when the counter is
    still ``version``. The counter is read first: rows read after it are at least as new."""
    with conn.transaction():
        row = conn.execute("SELECT version FROM oncelog_group_config_version").fetchone()
        now = int(row[0]) if row else 0
        if now == version:
            return now, None
        rows = conn.execute("SELECT group_id, configs FROM oncelog_group_config").fetchall()
    return now, {str(g): {str(k): str(v) for k, v in c.items()} for g, c in rows if c}
