"""The PostgreSQL schema of cluster mode, created idempotently.

Tables (every name starts with ``oncelog_``, so the schema can share a database):

``oncelog_partition``
    One row per partition: ``id`` (a compact key for the batch rows), ``topic``, ``partition``,
    ``leader_broker`` and ``leader_epoch`` (the lease: the epoch only grows), ``log_start_offset``
    and ``log_end_offset``. The row is the lock of its partition: every append, retention and
    DeleteRecords locks it (``FOR UPDATE``, in ``id`` order) and proceeds only if the epoch is
    the writer's, in the same transaction as its data, so a deposed leader can never write.

``oncelog_batch``
    One row per record batch, stored as written (``data``: the whole v2 batch, base offset and
    leader epoch already rewritten; never decoded per record), keyed by ``(partition_id,
    base_offset)``, with the header fields that fetch, ListOffsets, retention, producer-state
    recovery and the aborted-transaction index need as columns. ``data`` is stored EXTERNAL
    (out of line, uncompressed): batches are usually compressed by the producer already.

Invariants: for a partition, batches never overlap and cover ``[log_start_offset,
log_end_offset)`` up to the gaps compaction may leave (batches wholly below the log start are
deleted, one holding the log start may remain). ``log_end_offset`` is the last batch's
``last_offset + 1``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DDL", "SCHEMA_LOCK", "ensure_schema"]

#: pg_advisory_xact_lock key that serializes concurrent ``ensure_schema`` calls.
SCHEMA_LOCK = 0x6F6E63656C6F67  # "oncelog"

DDL = """
CREATE TABLE IF NOT EXISTS oncelog_partition (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic            text    NOT NULL,
    partition        integer NOT NULL CHECK (partition >= 0),
    leader_broker    integer NOT NULL DEFAULT -1,
    leader_epoch     integer NOT NULL DEFAULT -1,
    log_start_offset bigint  NOT NULL DEFAULT 0,
    log_end_offset   bigint  NOT NULL DEFAULT 0,
    CHECK (0 <= log_start_offset AND log_start_offset <= log_end_offset),
    UNIQUE (topic, partition)
);

CREATE TABLE IF NOT EXISTS oncelog_batch (
    partition_id     bigint   NOT NULL REFERENCES oncelog_partition (id) ON DELETE CASCADE,
    base_offset      bigint   NOT NULL,
    last_offset      bigint   NOT NULL,
    max_timestamp    bigint   NOT NULL,
    producer_id      bigint   NOT NULL,
    producer_epoch   smallint NOT NULL,
    base_sequence    integer  NOT NULL,
    is_transactional boolean  NOT NULL,
    is_control       boolean  NOT NULL,
    size             integer  NOT NULL,
    leader_epoch     integer  NOT NULL,
    data             bytea    NOT NULL,
    PRIMARY KEY (partition_id, base_offset),
    CHECK (last_offset >= base_offset AND size = octet_length(data))
);
ALTER TABLE oncelog_batch ALTER COLUMN data SET STORAGE EXTERNAL;
"""


def ensure_schema(conn: Any) -> None:
    """Create the tables unless they exist; safe to call from several brokers at once (an
    advisory lock serializes the DDL). Commits. ``conn`` is a psycopg connection."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(DDL)
