"""The SQL of the database inbox (issue 31; docs/DATABASE.md), installed by ``schema.ensure_schema``
after the outbox's (it uses ``oncelog.role_principal`` and the schema ``oncelog``).

An application that reads with a Kafka consumer writes its results and the group's committed
offsets in ONE transaction of the store's database: it calls ``oncelog.commit_offsets(group_id,
member_id, generation_or_epoch, topic, partition, next_offset [, metadata [, leader_epoch]])``
inside it. The function (SECURITY DEFINER, fixed search_path, EXECUTE revoked from PUBLIC):

1. validates the call and authorizes it with the cluster's ACLs: Read on the group and Read on
   the topic for the caller's principal (``oncelog.role_principal``, else ``User:<role>``), as
   Kafka authorizes OffsetCommit;
2. takes ``pg_advisory_xact_lock(INBOX_LOCK_NS, oncelog.inbox_lock_key(group, topic,
   partition))``: two transactions committing the same group partition follow each other (so
   the pending rows' id order is their commit order), and the group coordinator can tell,
   without waiting, that a transaction holding one is still open (OffsetFetch require_stable
   answers UNSTABLE_OFFSET_COMMIT for it, as for a pending TxnOffsetCommit, KIP-447);
3. fences the caller against ``oncelog.inbox_group``, the group coordinator's mirror of each
   group (kind, generation, state, member -> generation or member epoch), which the
   coordinator rewrites after each change, before answering the request that made it
   (broker/database/inbox.py). The row is read without a lock by a statement that starts after the
   advisory lock was taken, so under READ COMMITTED it is the latest committed version; other
   isolation levels are refused (their snapshot may predate a rebalance);
4. inserts one row into ``oncelog.inbox`` (the pending commits) and sends ``NOTIFY
   oncelog_inbox, '<group id>'`` (delivered only if the transaction commits).

The group coordinator of the group moves committed pending rows into ``__consumer_offsets`` as
ordinary offset commit records and deletes them; until then OffsetFetch reads them through
(the newest pending row of a partition is newer than anything in the log: every offset write of
a group drains its pending rows first).

Refusals are SQL errors raised before anything is written (SQLSTATE in parentheses; the message
starts with ``oncelog.commit_offsets: <KAFKA_ERROR_NAME>`` and DETAIL is the Kafka error name):

* a transaction that is not READ COMMITTED (0A000 INVALID_TXN_STATE);
* ``group_id`` NULL or empty, ``topic``/``partition``/``next_offset``/``generation_or_epoch``
  NULL (22004 INVALID_GROUP_ID / INVALID_REQUEST);
* unknown topic (42704 UNKNOWN_TOPIC_OR_PARTITION), partition out of range or a negative
  offset (22003 UNKNOWN_TOPIC_OR_PARTITION / INVALID_REQUEST);
* metadata longer than ``offset.metadata.max.bytes`` (54000 OFFSET_METADATA_TOO_LARGE);
* no ALLOW of Read (or All) on the group / the topic, or a DENY (42501
  GROUP_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED);
* fencing, as OffsetCommit (55000): ILLEGAL_GENERATION, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
  REBALANCE_IN_PROGRESS, GROUP_ID_NOT_FOUND (a generation >= 0 for a group that does not
  exist), COORDINATOR_NOT_AVAILABLE (a group being deleted).
"""

from __future__ import annotations

__all__ = ["COMMIT_SIGNATURE", "INBOX_CHANNEL", "INBOX_DDL", "INBOX_LOCK_NS", "METADATA_MAX_BYTES"]

#: LISTEN/NOTIFY channel of the inbox: the payload is the group id
INBOX_CHANNEL = "oncelog_inbox"
#: the first key of the inbox's advisory locks (the second: oncelog.inbox_lock_key): 'oinb'
INBOX_LOCK_NS = 0x6F696E62
#: Kafka's offset.metadata.max.bytes default (used unless the cluster's broker config sets it)
METADATA_MAX_BYTES = 4096
COMMIT_SIGNATURE = "oncelog.commit_offsets(text, text, integer, text, integer, bigint, text, integer)"

INBOX_DDL = f"""
-- Offsets committed by applications' transactions, not yet in __consumer_offsets: drained (and
-- deleted) by the group's coordinator. No foreign key and no unique key: a transaction holds
-- only its own new rows' locks.
CREATE TABLE IF NOT EXISTS oncelog.inbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_id     text    NOT NULL,
    topic        text    NOT NULL,
    partition    integer NOT NULL,
    next_offset  bigint  NOT NULL,
    leader_epoch integer NOT NULL,
    metadata     text    NOT NULL,
    ts           bigint  NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_by_group ON oncelog.inbox (group_id, id);
REVOKE ALL ON oncelog.inbox FROM PUBLIC;

-- The group coordinator's mirror of each group it coordinates (broker/database/inbox.py): kind
-- 'classic' | 'consumer' | 'none' (no such group), the classic generation, the state, and
-- members as {{member id: generation (classic) or member epoch (consumer)}}. Rows are
-- UPDATEd (a group that went away becomes kind 'none'), never deleted.
CREATE TABLE IF NOT EXISTS oncelog.inbox_group (
    group_id          text PRIMARY KEY,
    offsets_partition integer NOT NULL,
    kind              text    NOT NULL,
    generation        integer NOT NULL,
    state             text    NOT NULL,
    members           jsonb   NOT NULL,
    uses_inbox        boolean NOT NULL DEFAULT false  -- set by the coordinator at the group's first drain
);
CREATE INDEX IF NOT EXISTS inbox_group_partition ON oncelog.inbox_group (offsets_partition);
REVOKE ALL ON oncelog.inbox_group FROM PUBLIC;

-- The second key of the advisory lock of one group partition
CREATE OR REPLACE FUNCTION oncelog.inbox_lock_key(group_id text, topic text, partition integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT hashtext(group_id || E'\\n' || topic || E'\\n' || partition::text)
$$;

-- May the principal Read the resource (2 topic, 3 group)? Kafka's rules, as oncelog.may_write
CREATE OR REPLACE FUNCTION oncelog.may_read(p_principal text, p_host text, p_type int, p_name text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    denied boolean;
    allowed boolean;
BEGIN
    SELECT bool_or(permission = 2), bool_or(permission = 3) INTO denied, allowed FROM oncelog_acl
    WHERE resource_type = p_type
      AND ((pattern_type = 3 AND (name = p_name OR name = '*'))
           OR (pattern_type = 4 AND starts_with(p_name, name)))
      AND (principal = p_principal OR principal = 'User:*')
      AND (host = '*' OR host = p_host)
      AND operation IN (2, 3);
    RETURN NOT coalesce(denied, false) AND coalesce(allowed, false);
END
$$;

CREATE OR REPLACE FUNCTION oncelog.commit_offsets(group_id text, member_id text, generation_or_epoch integer,
                                                  topic text, partition integer, next_offset bigint,
                                                  metadata text DEFAULT NULL, leader_epoch integer DEFAULT -1)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    t record;
    g record;
    gid text := commit_offsets.group_id;
    mid text := coalesce(commit_offsets.member_id, '');
    gen integer := commit_offsets.generation_or_epoch;
    meta text := coalesce(commit_offsets.metadata, '');
    who text;
    addr text := coalesce(host(inet_client_addr()), '');
    limit_bytes bigint;
    err text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: INVALID_TXN_STATE: needs a READ COMMITTED transaction (this one is %): the fencing check must read the group as it is now, not as the snapshot of the transaction saw it',
            current_setting('transaction_isolation') USING ERRCODE = '0A000', DETAIL = 'INVALID_TXN_STATE';
    END IF;
    IF gid IS NULL OR gid = '' THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: INVALID_GROUP_ID: group_id must not be NULL or empty'
            USING ERRCODE = '22004', DETAIL = 'INVALID_GROUP_ID';
    END IF;
    IF commit_offsets.topic IS NULL OR commit_offsets.partition IS NULL OR commit_offsets.next_offset IS NULL
       OR gen IS NULL THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: INVALID_REQUEST: topic, partition, next_offset and generation_or_epoch must not be NULL'
            USING ERRCODE = '22004', DETAIL = 'INVALID_REQUEST';
    END IF;
    who := coalesce((SELECT r.principal FROM oncelog.role_principal r WHERE r.role = session_user),
                    'User:' || session_user);
    IF NOT oncelog.may_read(who, addr, 3, gid) THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: GROUP_AUTHORIZATION_FAILED: % (role %) may not Read group "%"',
            who, session_user, gid USING ERRCODE = '42501', DETAIL = 'GROUP_AUTHORIZATION_FAILED';
    END IF;
    SELECT * INTO t FROM oncelog_topic ot WHERE ot.name = commit_offsets.topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: UNKNOWN_TOPIC_OR_PARTITION: topic "%" does not exist',
            commit_offsets.topic USING ERRCODE = '42704', DETAIL = 'UNKNOWN_TOPIC_OR_PARTITION';
    END IF;
    IF NOT oncelog.may_read(who, addr, 2, commit_offsets.topic) THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: TOPIC_AUTHORIZATION_FAILED: % (role %) may not Read topic "%"',
            who, session_user, commit_offsets.topic USING ERRCODE = '42501', DETAIL = 'TOPIC_AUTHORIZATION_FAILED';
    END IF;
    IF commit_offsets.partition < 0 OR commit_offsets.partition >= t.partitions THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: UNKNOWN_TOPIC_OR_PARTITION: partition % out of range: topic "%" has % partition(s)',
            commit_offsets.partition, commit_offsets.topic, t.partitions
            USING ERRCODE = '22003', DETAIL = 'UNKNOWN_TOPIC_OR_PARTITION';
    END IF;
    IF commit_offsets.next_offset < 0 THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: INVALID_REQUEST: next_offset % is negative', commit_offsets.next_offset
            USING ERRCODE = '22003', DETAIL = 'INVALID_REQUEST';
    END IF;
    limit_bytes := coalesce((SELECT (c.configs->>'offset.metadata.max.bytes')::bigint FROM oncelog_broker_config c
                             WHERE c.resource = ''), {METADATA_MAX_BYTES});
    IF octet_length(convert_to(meta, 'UTF8')) > limit_bytes THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: OFFSET_METADATA_TOO_LARGE: metadata longer than % bytes', limit_bytes
            USING ERRCODE = '54000', DETAIL = 'OFFSET_METADATA_TOO_LARGE';
    END IF;

    PERFORM pg_advisory_xact_lock({INBOX_LOCK_NS}, oncelog.inbox_lock_key(gid, commit_offsets.topic, commit_offsets.partition));

    -- fencing, as the coordinator's OffsetCommit (coordinator/group/shard.py commit_offsets)
    SELECT * INTO g FROM oncelog.inbox_group ig WHERE ig.group_id = gid;
    IF NOT FOUND OR g.kind = 'none' THEN
        IF gen >= 0 THEN
            err := 'GROUP_ID_NOT_FOUND';
        END IF;
    ELSIF g.kind = 'consumer' THEN
        IF NOT (gen < 0 AND g.members = '{{}}'::jsonb) THEN
            IF NOT g.members ? mid THEN
                err := 'UNKNOWN_MEMBER_ID';
            ELSIF (g.members->>mid)::int <> gen THEN
                err := 'STALE_MEMBER_EPOCH';
            END IF;
        END IF;
    ELSIF g.state = 'Dead' THEN
        err := 'COORDINATOR_NOT_AVAILABLE';
    ELSIF NOT (gen < 0 AND g.state = 'Empty') THEN
        IF NOT g.members ? mid THEN
            err := 'UNKNOWN_MEMBER_ID';
        ELSIF gen <> g.generation THEN
            err := 'ILLEGAL_GENERATION';
        ELSIF g.state = 'CompletingRebalance' THEN
            err := 'REBALANCE_IN_PROGRESS';
        ELSIF g.state = 'Empty' THEN
            err := 'UNKNOWN_MEMBER_ID';
        END IF;
    END IF;
    IF err IS NOT NULL THEN
        RAISE EXCEPTION 'oncelog.commit_offsets: %: group "%" member "%" generation/epoch % (the group is at generation %, %, member epoch %)',
            err, gid, mid, gen, coalesce(g.generation, -1), coalesce(g.state, 'unknown'),
            coalesce(g.members->>mid, 'none') USING ERRCODE = '55000', DETAIL = err;
    END IF;

    INSERT INTO oncelog.inbox (group_id, topic, partition, next_offset, leader_epoch, metadata, ts)
    VALUES (gid, commit_offsets.topic, commit_offsets.partition, commit_offsets.next_offset,
            coalesce(commit_offsets.leader_epoch, -1), meta, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    PERFORM pg_notify('{INBOX_CHANNEL}', gid);
END
$$;
REVOKE ALL ON FUNCTION {COMMIT_SIGNATURE} FROM PUBLIC;
REVOKE ALL ON FUNCTION oncelog.may_read(text, text, int, text) FROM PUBLIC;
DO $do$ BEGIN
    EXECUTE format('ALTER FUNCTION {COMMIT_SIGNATURE} SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION oncelog.may_read(text, text, int, text) SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END $do$;

-- For the coordinator (one statement per OffsetFetch): for each asked partition, whether an
-- open transaction holds its inbox lock (a non-blocking try, from a fresh statement), then the
-- newest pending commit of each partition of the group (read after the tries, so a commit
-- that released its lock before a try is seen).
CREATE OR REPLACE FUNCTION oncelog.inbox_fetch(p_group text, p_topics text[], p_partitions integer[],
                                               p_check boolean)
RETURNS TABLE (topic text, partition integer, next_offset bigint, leader_epoch integer, metadata text,
               ts bigint, unstable boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    busy text[] := '{{}}';
    i integer;
BEGIN
    IF p_check THEN
        FOR i IN 1 .. coalesce(array_length(p_topics, 1), 0) LOOP
            IF NOT pg_try_advisory_xact_lock({INBOX_LOCK_NS}, oncelog.inbox_lock_key(p_group, p_topics[i], p_partitions[i])) THEN
                busy := busy || (p_topics[i] || E'\\n' || p_partitions[i]::text);
            END IF;
        END LOOP;
    END IF;
    RETURN QUERY
        SELECT DISTINCT ON (x.topic, x.partition) x.topic, x.partition, x.next_offset, x.leader_epoch, x.metadata, x.ts,
               (x.topic || E'\\n' || x.partition::text) = ANY(busy)
        FROM oncelog.inbox x WHERE x.group_id = p_group ORDER BY x.topic, x.partition, x.id DESC;
    RETURN QUERY
        SELECT split_part(b, E'\\n', 1), split_part(b, E'\\n', 2)::int, NULL::bigint, NULL::int, NULL::text, NULL::bigint, true
        FROM unnest(busy) b
        WHERE NOT EXISTS (SELECT 1 FROM oncelog.inbox x WHERE x.group_id = p_group
                          AND x.topic = split_part(b, E'\\n', 1) AND x.partition = split_part(b, E'\\n', 2)::int);
END
$$;
REVOKE ALL ON FUNCTION oncelog.inbox_fetch(text, text[], integer[], boolean) FROM PUBLIC;
DO $do$ BEGIN
    EXECUTE format('ALTER FUNCTION oncelog.inbox_fetch(text, text[], integer[], boolean) SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END $do$;
"""
