"""Topics in the store: name, topic id, partition count and configs, with their partitions' rows.

``create`` writes the topic's row and one ``oncelog_partition`` row per partition (no leader,
epoch -1) in one transaction, so a topic is either wholly there or not at all; partitions are
inserted in partition order, which is their placement order (assignment.py) after every
partition created before them. The next rebalance gives them leaders. ``configs`` are the
topic's Kafka-named overrides as strings (stored as JSON).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from oncelog.protocol.errors import InvalidPartitions, TopicAlreadyExists, UnknownTopicOrPartition

__all__ = ["TopicInfo", "create", "delete", "get", "grow", "list_all", "set_configs"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


_COLUMNS = "name, topic_id, partitions, configs"


def create(conn: Any, name: str, partitions: int, configs: Mapping[str, str] | None = None,
           topic_id: uuid.UUID | None = None) -> TopicInfo:
    """Create a topic and its partitions' rows in one transaction. Commits. Raises
    TopicAlreadyExists (nothing written) or InvalidPartitions."""
    if partitions <= 0:
        raise InvalidPartitions(f"topic {name!r}: {partitions} partitions; at least 1 is needed")
    topic = TopicInfo(name, topic_id or uuid.uuid4(), partitions, dict(configs or {}))
    with conn.transaction():
        row = conn.execute("INSERT INTO oncelog_topic (name, topic_id, partitions, configs) "
                           "VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (name) DO NOTHING RETURNING name",
                           (name, topic.topic_id, partitions, json.dumps(topic.configs))).fetchone()
        if row is None:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        # issue 29: the storage engine is fixed at creation (cluster/diskless_schema.py)
        engine = "diskless" if topic.configs.get("diskless.enable") == "true" else "postgres"
        conn.execute("INSERT INTO oncelog_partition (topic, partition, engine) SELECT %s, p, %s "
                     "FROM generate_series(0, %s - 1) AS p ORDER BY p ON CONFLICT (topic, partition) DO NOTHING",
                     (name, engine, partitions))
    return topic


def ensure(conn: Any, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> TopicInfo:
    """The topic ``name``, created with ``partitions`` and ``configs`` unless it exists (then
    as it exists: an internal topic keeps the partition count its first broker gave it)."""
    try:
        return create(conn, name, partitions, configs)
    except TopicAlreadyExists:
        found = get(conn, name)
        assert found is not None, f"topic {name!r} exists but cannot be read"
        return found


def get(conn: Any, name: str) -> TopicInfo | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM oncelog_topic WHERE name = %s", (name,)).fetchone()
    return None if row is None else TopicInfo(*row)


def list_all(conn: Any) -> list[TopicInfo]:
    """Every topic, by name."""
    return [TopicInfo(*r) for r in conn.execute(f"SELECT {_COLUMNS} FROM oncelog_topic ORDER BY name").fetchall()]


def set_configs(conn: Any, name: str, configs: Mapping[str, str]) -> bool:
    """Replace the configs of topic ``name`` (AlterConfigs) and notify ``oncelog_metadata`` so
    every broker reloads its view at once (the leader trackers apply them). Commits. Returns
    False when the topic does not exist."""
    with conn.transaction():
        row = conn.execute("UPDATE oncelog_topic SET configs = %s::jsonb WHERE name = %s RETURNING name",
                           (json.dumps(dict(configs)), name)).fetchone()
        conn.execute("SELECT pg_notify('oncelog_metadata', '')")
    return row is not None
def grow(conn: Any, name: str, partitions: int) -> TopicInfo:
    """Grow topic ``name`` to ``partitions``: its row's count and the new partitions' rows
    (no leader, epoch -1; placed after every partition created before them) in one
    transaction. Commits. Raises UnknownTopicOrPartition, or InvalidPartitions when the stored
    count is not smaller (another broker grew it first; nothing written)."""
    with conn.transaction():
        row = conn.execute("SELECT partitions, configs->>'diskless.enable' FROM oncelog_topic WHERE name = %s "
                           "FOR UPDATE", (name,)).fetchone()
        if row is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        if row[0] >= partitions:
            raise InvalidPartitions(f"The topic {name} currently has {row[0]} partition(s); "
                                    f"{partitions} would not be an increase.")
        conn.execute("UPDATE oncelog_topic SET partitions = %s WHERE name = %s", (partitions, name))
        engine = "diskless" if row[1] == "true" else "postgres"  # issue 29: the topic's engine
        conn.execute("INSERT INTO oncelog_partition (topic, partition, engine) SELECT %s, p, %s "
                     "FROM generate_series(%s, %s - 1) AS p ORDER BY p ON CONFLICT (topic, partition) DO NOTHING",
                     (name, engine, row[0], partitions))
    found = get(conn, name)
    assert found is not None
    return found


def delete(conn: Any, name: str) -> TopicInfo:
    """DeleteTopics: remove topic ``name``, its partitions' rows and (cascading) their batches in
    one transaction, and notify every broker. Commits. A leader's append in flight holds its
    partition row, so the delete waits for it; an append after it finds no row and is refused
    as a deposed leader's (``oncelog_append`` status 1), and the leader closes the partition at
    its next view. Raises UnknownTopicOrPartition."""
    with conn.transaction():
        row = conn.execute(f"SELECT {_COLUMNS} FROM oncelog_topic WHERE name = %s FOR UPDATE", (name,)).fetchone()
        if row is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        conn.execute("DELETE FROM oncelog_partition WHERE topic = %s", (name,))
        conn.execute("DELETE FROM oncelog_topic WHERE name = %s", (name,))
        conn.execute("SELECT pg_notify('oncelog_metadata', '')")
    return TopicInfo(*row)
