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
    ``leader_epoch`` is the epoch of the leader that wrote the batch (also in the batch's
    partitionLeaderEpoch); epochs grow along the offsets, and the index ``oncelog_batch_epoch``
    on ``(partition_id, leader_epoch, base_offset)`` answers OffsetForLeaderEpoch (KIP-320)
    with two probes. Created by ``CREATE INDEX IF NOT EXISTS`` like the rest: a database made
    before it gets it (built once) when the first broker starts.

``oncelog_topic``
    One row per topic: ``name``, ``topic_id`` (a UUID, as Kafka's), ``partitions`` (the count),
    ``configs`` (JSON: the topic's Kafka-named overrides), ``created_at``. ``topics.create``
    writes it and its partitions' rows in one transaction.

``oncelog_broker_config``
    The dynamic broker configs (AlterConfigs on a BROKER resource; broker_configs.py): one row
    per resource, ``resource`` ("" for the cluster-wide default, a node id for one broker's own)
    and ``configs`` (JSON: Kafka-named values as strings). Every broker applies both layers.

``oncelog_broker``
    One row per broker ever registered (membership.py): ``node_id``, ``host``, ``port``,
    ``rack``, ``incarnation`` (a UUID per broker process), ``broker_epoch`` (from
    ``oncelog_broker_epoch_seq``: grows with every registration, as Kafka's broker epoch),
    ``session_timeout_ms`` and ``session_expires``, computed from the database's clock. A broker
    is live while ``session_expires > clock_timestamp()``; the row stays after its session ends,
    so its preferred partitions stay its own (assignment.py).

``oncelog_scram_credential``
    One row per user and SCRAM mechanism (issue 18, cluster/credentials.py): ``username``,
    ``mechanism`` (``SCRAM-SHA-256``/``SCRAM-SHA-512``), ``salt``, ``stored_key``,
    ``server_key``, ``iterations``: what SCRAM needs, never a password. Every broker reads the
    table (at start, then every second) and AlterUserScramCredentials writes it.

``oncelog_acl`` (issue 18)
    One row per ACL binding (Kafka's codes; the whole binding is the key), and
    ``oncelog_acl_version`` (one row): a counter every change of the ACLs increments in the same
    transaction, so a broker reloads the bindings only when it moved (cluster/acls.py).

``oncelog_share_state``, ``oncelog_share_config`` (issue 30, cluster/share_state.py)
    Share groups (KIP-932): one row per share partition (group, topic id, partition) with its
    encoded snapshot, written by the topic partition's leader fenced by its leader epoch; one
    row per share group with its configs.

``oncelog_group_config``, ``oncelog_group_config_version`` (cluster/group_configs.py)
    The consumer group configs (KIP-848's ``consumer.session.timeout.ms`` ...): one row per
    group with configs of its own, and a counter every change moves, so brokers reload them
    only when it did.

``oncelog_fence(...)``
    The exactly-once fence every commit path calls (the group commit's ``oncelog_append``, the
    diskless ``oncelog_dl_commit``): per batch, the leader-epoch and log-end checks, the outbox
    rows it drains deleted (all or none), the log end moved; the caller writes the accepted
    batches' rows in the same transaction.

``oncelog_append(...)``
    The function one group commit round calls: the fence and the rows of every batch of the
    round it accepted, in one statement (one round trip; see group_commit.py).

``oncelog_dl_object``, ``oncelog_dl_batch``, ``oncelog_dl_commit(...)``, ``oncelog_partition.engine``
    Diskless topics (issue 29): the coordinates of batches kept in an object store
    (cluster/diskless_schema.py, docs/DISKLESS.md).

schema ``oncelog`` (issue 31, outbox_schema.py, docs/DATABASE.md)
    The database outbox: ``oncelog.send(...)`` for applications, the pending table
    ``oncelog.outbox`` and the role-to-principal map ``oncelog.role_principal``.

Invariants: for a partition, batches never overlap and cover ``[log_start_offset,
log_end_offset)`` up to the gaps compaction may leave (batches wholly below the log start are
deleted, one holding the log start may remain). ``log_end_offset`` is the last batch's
``last_offset + 1``.
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.cluster.inbox_schema import INBOX_DDL
from oncelog.cluster.outbox_schema import OUTBOX_DDL
from oncelog.cluster.diskless_schema import DISKLESS_DDL
from oncelog.cluster.share_state import DDL as SHARE_DDL
from oncelog.cluster.group_configs import DDL as GROUP_CONFIG_DDL

__all__ = ["DDL", "SCHEMA_LOCK", "ensure_schema"]

log = logging.getLogger(__name__)

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
-- OffsetForLeaderEpoch (KIP-320): a partition's epoch history is its batches' leader epochs
CREATE INDEX IF NOT EXISTS oncelog_batch_epoch ON oncelog_batch (partition_id, leader_epoch, base_offset);

CREATE TABLE IF NOT EXISTS oncelog_topic (
    name       text        PRIMARY KEY,
    topic_id   uuid        NOT NULL UNIQUE,
    partitions integer     NOT NULL CHECK (partitions > 0),
    configs    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS oncelog_scram_credential (
    username   text    NOT NULL,
    mechanism  text    NOT NULL,
    salt       bytea   NOT NULL,
    stored_key bytea   NOT NULL,
    server_key bytea   NOT NULL,
    iterations integer NOT NULL,
    PRIMARY KEY (username, mechanism)
);

CREATE SEQUENCE IF NOT EXISTS oncelog_broker_epoch_seq;

-- ACLs (issue 18, cluster/acls.py)
CREATE TABLE IF NOT EXISTS oncelog_acl (
    resource_type smallint NOT NULL,
    name          text     NOT NULL,
    pattern_type  smallint NOT NULL,
    principal     text     NOT NULL,
    host          text     NOT NULL,
    operation     smallint NOT NULL,
    permission    smallint NOT NULL,
    PRIMARY KEY (resource_type, name, pattern_type, principal, host, operation, permission)
);
CREATE TABLE IF NOT EXISTS oncelog_acl_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);

-- the cluster id, made by the first broker (one row)
CREATE TABLE IF NOT EXISTS oncelog_cluster (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    cluster_id text    NOT NULL
);

CREATE TABLE IF NOT EXISTS oncelog_broker_config (
    resource text  PRIMARY KEY,
    configs  jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- producer id blocks (cluster/producer_ids.py): never handed out twice
CREATE SEQUENCE IF NOT EXISTS oncelog_producer_id_block_seq;

CREATE TABLE IF NOT EXISTS oncelog_broker (
    node_id            integer     PRIMARY KEY CHECK (node_id >= 0),
    host               text        NOT NULL,
    port               integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    rack               text,
    incarnation        uuid        NOT NULL,
    broker_epoch       bigint      NOT NULL,
    session_timeout_ms integer     NOT NULL CHECK (session_timeout_ms > 0),
    registered_at      timestamptz NOT NULL,
    session_expires    timestamptz NOT NULL
);
-- issue 18: every listener's advertised endpoint, {"NAME": ["host", port]}; host/port above are
-- the primary listener's (the one other brokers use)
ALTER TABLE oncelog_broker ADD COLUMN IF NOT EXISTS listeners jsonb NOT NULL DEFAULT '{}'::jsonb;

-- The exactly-once fence, THE check of every commit path (oncelog_append below, the diskless
-- oncelog_dl_commit): lock the partitions' rows in id order, then per batch, in order, accept it
-- if its leader epoch is the store's and its base offset the store's log end, delete the outbox
-- rows it drains, and move the log end past it. Answers one row per batch: status 0 accepted
-- (the caller inserts the batch's row in the same transaction), 1 no such partition, 2 fenced
-- (epoch moved), 3 log end moved, 4 outbox rows not all there; with the store's epoch, leader
-- and log end as they were when the batch was judged. Issue 31: batch i drains
-- p_drain_counts[i] rows of oncelog.outbox, whose ids follow in p_drain_ids (the batches' lists
-- concatenated): they are deleted in the same transaction as the batch is written, all or none
-- (status 4 when one is missing: nothing of i is written and the log end does not move).
CREATE OR REPLACE FUNCTION oncelog_fence(
    p_ids int8[], p_epochs int4[], p_bases int8[], p_lasts int8[], p_drain_counts int4[], p_drain_ids int8[])
RETURNS TABLE (idx int4, status int4, store_epoch int4, store_leader int4, store_end int8)
LANGUAGE plpgsql AS $$
DECLARE
    st record;
    pos int := 0;
    n int;
    c int;
BEGIN
    PERFORM 1 FROM oncelog_partition WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        SELECT leader_broker, leader_epoch, log_end_offset INTO st FROM oncelog_partition WHERE id = p_ids[i];
        idx := i - 1;
        IF NOT FOUND THEN
            status := 1; store_epoch := -1; store_leader := -1; store_end := -1;
        ELSE
            store_epoch := st.leader_epoch; store_leader := st.leader_broker; store_end := st.log_end_offset;
            IF st.leader_epoch <> p_epochs[i] THEN
                status := 2;
            ELSIF st.log_end_offset <> p_bases[i] THEN
                status := 3;
            ELSE
                status := 0;
                c := coalesce(p_drain_counts[i], 0);
                IF c > 0 THEN
                    BEGIN  -- a subtransaction: a partial delete is undone
                        DELETE FROM oncelog.outbox WHERE partition_id = p_ids[i] AND id = ANY(p_drain_ids[pos + 1 : pos + c]);
                        GET DIAGNOSTICS n = ROW_COUNT;
                        IF n <> c THEN
                            RAISE EXCEPTION USING ERRCODE = 'OL001';
                        END IF;
                    EXCEPTION WHEN SQLSTATE 'OL001' THEN
                        status := 4;
                    END;
                END IF;
                IF status = 0 THEN
                    UPDATE oncelog_partition SET log_end_offset = p_lasts[i] + 1 WHERE id = p_ids[i];
                END IF;
            END IF;
        END IF;
        pos := pos + coalesce(p_drain_counts[i], 0);
        RETURN NEXT;
    END LOOP;
END
$$;

-- One group commit round (storage/engines/postgres/group_commit.py) in one statement: the fence
-- (oncelog_fence), then the row of every batch it accepted. Answers the fence's rows. Run in
-- autocommit mode, the statement is the transaction: its answer arrives after COMMIT. A database
-- made before the fence existed gets this body (same signature) when a broker starts.
DROP FUNCTION IF EXISTS oncelog_append(int8[], int4[], int8[], int8[], int8[], int8[], int2[], int4[], bool[],
                                       bool[], bytea[]);
CREATE OR REPLACE FUNCTION oncelog_append(
    p_ids int8[], p_epochs int4[], p_bases int8[], p_lasts int8[], p_max_ts int8[], p_pids int8[],
    p_pepochs int2[], p_seqs int4[], p_txn bool[], p_ctl bool[], p_data bytea[], p_drain_counts int4[],
    p_drain_ids int8[])
RETURNS TABLE (idx int4, status int4, store_epoch int4, store_leader int4, store_end int8)
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    i int;
BEGIN
    FOR f IN SELECT * FROM oncelog_fence(p_ids, p_epochs, p_bases, p_lasts, p_drain_counts, p_drain_ids) LOOP
        i := f.idx + 1;
        IF f.status = 0 THEN
            INSERT INTO oncelog_batch (partition_id, base_offset, last_offset, max_timestamp, producer_id,
                producer_epoch, base_sequence, is_transactional, is_control, size, leader_epoch, data)
            VALUES (p_ids[i], p_bases[i], p_lasts[i], p_max_ts[i], p_pids[i], p_pepochs[i], p_seqs[i],
                p_txn[i], p_ctl[i], octet_length(p_data[i]), p_epochs[i], p_data[i]);
        END IF;
        idx := f.idx; status := f.status; store_epoch := f.store_epoch; store_leader := f.store_leader;
        store_end := f.store_end;
        RETURN NEXT;
    END LOOP;
END
$$;
"""


def ensure_schema(conn: Any) -> None:
    """Create the tables unless they exist, and the outbox's schema ``oncelog`` (issue 31,
    outbox_schema.py); safe to call from several brokers at once (an advisory lock serializes
    the DDL). Commits. ``conn`` is a psycopg connection."""
    import psycopg

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(DDL)
        conn.execute(SHARE_DDL)  # share groups' state (issue 30, cluster/share_state.py)
        conn.execute(GROUP_CONFIG_DDL)  # consumer group configs (cluster/group_configs.py)
        conn.execute(DISKLESS_DDL)  # issue 29: diskless topics' coordinates (cluster/diskless_schema.py)
        try:
            with conn.transaction():  # a savepoint: the cluster works without the outbox
                conn.execute(OUTBOX_DDL)
                conn.execute(INBOX_DDL)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("the database outbox (schema oncelog, docs/DATABASE.md) is not installed: the store's "
                        "role may not create it (%s); grant it CREATE on the database to have it", exc)
