"""The PostgreSQL tables of diskless topics (issue 29, docs/DISKLESS.md §2.5; the engine is in
diskless/): PostgreSQL only orders the batches; their bytes are in the object store. Part of
the cluster schema (schema.py ``ensure_schema`` runs it after ``DDL``).

``oncelog_partition.engine``
    ``'postgres'`` (default) or ``'diskless'``: set when the topic is created (cluster/topics.py)
    from its ``diskless.enable`` config, never changed afterwards.

``oncelog_dl_object``
    One row per committed object: its key (relative to the store's prefix), the broker that
    uploaded it, its size, when it was committed, and ``deletable_at``: set by the collector
    (diskless/collector.py) when no coordinate points into it any more; the object is deleted
    from the store a grace period later, then its row.

``oncelog_dl_batch``
    The coordinates of one batch: partition, assigned offsets, where its bytes are (object and
    byte range; a control batch — a transaction marker, ~80 bytes — is kept inline instead, no
    object), and the header fields that producer-state recovery, the aborted index, ListOffsets,
    OffsetForLeaderEpoch and retention need, so ``Partition.recover`` reads coordinates only.
    Deleted with its partition (cascade), by retention and DeleteRecords.

``oncelog_dl_commit(...)``
    ONE statement (autocommit: the statement is the transaction) committing one object's
    batches: insert the object row (when the object holds data batches), then the exactly-once
    fence every commit path shares (``oncelog_fence``, schema.py: the partitions' rows locked in
    id order; per batch, in object order, accepted when its leader epoch is the store's and its
    base offset the store's log end — the offsets were assigned by the leader, as the PostgreSQL
    engine does; the epoch condition fences a deposed leader — and the log end moved), and the
    coordinates of every batch it accepted. Answers the fence's row per batch (0 appended, 1 no
    such partition, 2 fenced, 3 log end moved, 4 outbox rows not all there).
    Issue 31 (docs/DATABASE.md): batch i drains ``p_drain_counts[i]`` rows of ``oncelog.outbox``,
    whose ids follow in ``p_drain_ids`` (the batches' lists concatenated); they are deleted in
    the same transaction as the batch's coordinates are inserted, all or none (status 4 when one
    is missing: nothing of batch i is written, and the log end does not move). So a drained row
    is gone iff its batch's coordinates are committed.
"""

from __future__ import annotations

__all__ = ["DISKLESS_DDL"]

DISKLESS_DDL = """
ALTER TABLE oncelog_partition ADD COLUMN IF NOT EXISTS engine text NOT NULL DEFAULT 'postgres';

CREATE TABLE IF NOT EXISTS oncelog_dl_object (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    object_key   text        NOT NULL UNIQUE,
    broker       integer     NOT NULL,
    size         bigint      NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    deletable_at timestamptz
);
CREATE INDEX IF NOT EXISTS oncelog_dl_object_deletable ON oncelog_dl_object (deletable_at)
    WHERE deletable_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS oncelog_dl_batch (
    partition_id     bigint   NOT NULL REFERENCES oncelog_partition (id) ON DELETE CASCADE,
    base_offset      bigint   NOT NULL,
    last_offset      bigint   NOT NULL,
    record_count     integer  NOT NULL,
    object_id        bigint   REFERENCES oncelog_dl_object (id),
    byte_offset      bigint   NOT NULL,
    size             integer  NOT NULL,
    attributes       smallint NOT NULL,
    first_timestamp  bigint   NOT NULL,
    max_timestamp    bigint   NOT NULL,
    producer_id      bigint   NOT NULL,
    producer_epoch   smallint NOT NULL,
    base_sequence    integer  NOT NULL,
    is_transactional boolean  NOT NULL,
    is_control       boolean  NOT NULL,
    leader_epoch     integer  NOT NULL,
    inline_data      bytea,
    PRIMARY KEY (partition_id, base_offset),
    CHECK (last_offset >= base_offset AND (object_id IS NULL) = (inline_data IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS oncelog_dl_batch_object ON oncelog_dl_batch (object_id);
CREATE INDEX IF NOT EXISTS oncelog_dl_batch_epoch ON oncelog_dl_batch (partition_id, leader_epoch, base_offset);

DROP FUNCTION IF EXISTS oncelog_dl_commit(text, int4, int8, int8[], int4[], int8[], int8[], int4[], int2[],
                                          int8[], int8[], int8[], int2[], int4[], bool[], bool[], int8[],
                                          int4[], bytea[]);
CREATE OR REPLACE FUNCTION oncelog_dl_commit(
    p_key text, p_broker int4, p_size int8,
    p_ids int8[], p_epochs int4[], p_bases int8[], p_lasts int8[], p_counts int4[], p_attrs int2[],
    p_first_ts int8[], p_max_ts int8[], p_pids int8[], p_pepochs int2[], p_seqs int4[], p_txn bool[],
    p_ctl bool[], p_byte_offs int8[], p_sizes int4[], p_inline bytea[], p_drain_counts int4[],
    p_drain_ids int8[])
RETURNS TABLE (idx int4, status int4, store_epoch int4, store_leader int4, store_end int8)
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    i int;
    obj int8 := NULL;
BEGIN
    IF p_key IS NOT NULL THEN
        INSERT INTO oncelog_dl_object (object_key, broker, size) VALUES (p_key, p_broker, p_size)
            RETURNING id INTO obj;
    END IF;
    FOR f IN SELECT * FROM oncelog_fence(p_ids, p_epochs, p_bases, p_lasts, p_drain_counts, p_drain_ids) LOOP
        i := f.idx + 1;
        IF f.status = 0 THEN
            INSERT INTO oncelog_dl_batch (partition_id, base_offset, last_offset, record_count, object_id,
                byte_offset, size, attributes, first_timestamp, max_timestamp, producer_id, producer_epoch,
                base_sequence, is_transactional, is_control, leader_epoch, inline_data)
            VALUES (p_ids[i], p_bases[i], p_lasts[i], p_counts[i],
                CASE WHEN p_inline[i] IS NULL THEN obj END, p_byte_offs[i], p_sizes[i], p_attrs[i],
                p_first_ts[i], p_max_ts[i], p_pids[i], p_pepochs[i], p_seqs[i], p_txn[i], p_ctl[i],
                p_epochs[i], p_inline[i]);
        END IF;
        idx := f.idx; status := f.status; store_epoch := f.store_epoch; store_leader := f.store_leader;
        store_end := f.store_end;
        RETURN NEXT;
    END LOOP;
END
$$;
"""
