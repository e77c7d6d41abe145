"""The SQL of the database outbox (issue 31; docs/DATABASE.md), installed by ``schema.ensure_schema``.

An application connected to the store's database calls ``oncelog.send(topic, key, value,
headers, partition)`` inside its own transaction. The function (SECURITY DEFINER, fixed
search_path, EXECUTE revoked from PUBLIC) validates the call and authorizes it against the
cluster's ACLs, then inserts one row into ``oncelog.outbox`` (the pending table) and sends
``NOTIFY oncelog_outbox, '<partition id>'``; PostgreSQL delivers the notification only if the
transaction commits, and the row exists only if it commits. The partition's leader drains the
pending rows (broker/database/outbox_drainer.py): it appends them as one record batch through the group
commit, whose ``oncelog_append`` deletes the drained rows in the same transaction (schema.py),
so a record is in the log iff its row left the table, exactly once.

Locks: ``send`` reads ``oncelog_topic`` and ``oncelog_partition`` without locking them and has
no foreign key (a foreign key would take FOR KEY SHARE on the partition's row, which every
append locks FOR UPDATE): the user's transaction holds only the row locks of its own new rows,
which nobody else can see, so a long transaction delays no writer and no drain.

Refusals are SQL errors raised before anything is written (SQLSTATE in parentheses):

* ``topic`` NULL, unknown, or internal (22004 / 42704 / 42501);
* ``partition`` outside ``[0, partitions)`` (22003);
* a NULL key on a compacted topic (22004), as Kafka's "Compacted topic cannot accept message
  without key";
* ``headers`` that are neither a JSON object of string/null values nor an array of
  ``[name, value]`` pairs (22023);
* a record larger than the topic's ``max.message.bytes`` (else the cluster's
  ``message.max.bytes``, else 1048588) once framed as a batch (54000);
* a principal with no ALLOW of Write (or All) on the topic, or with a DENY (42501,
  "TOPIC_AUTHORIZATION_FAILED").

Principals: ``oncelog.role_principal`` maps a PostgreSQL role (``session_user``: the role that
logged in; ``SET ROLE`` does not change it) to a Kafka principal; a role with no row is
``User:<role name>``. The ACL rules are Kafka's (literal, ``*`` and prefixed bindings; principal
or ``User:*``; host = the client's address or ``*``; a DENY wins) except that there is no super
user and no ``allow.everyone.if.no.acl.found``: a call needs an explicit ALLOW binding.
"""

from __future__ import annotations

__all__ = ["OUTBOX_CHANNEL", "OUTBOX_DDL", "RECORD_OVERHEAD", "SEND_SIGNATURE"]

#: LISTEN/NOTIFY channel of the outbox: the payload is the partition's id (oncelog_partition.id)
OUTBOX_CHANNEL = "oncelog_outbox"
#: bytes a batch adds around its records (the v2 header)
BATCH_OVERHEAD = 61
#: the most bytes one record's framing adds besides its key, value and header bytes (varints)
RECORD_OVERHEAD = 25
SEND_SIGNATURE = "oncelog.send(text, bytea, bytea, jsonb, integer)"

OUTBOX_DDL = f"""
CREATE SCHEMA IF NOT EXISTS oncelog;
REVOKE ALL ON SCHEMA oncelog FROM PUBLIC;

-- Pending records: one row per oncelog.send, drained (deleted) by the partition's leader in
-- the transaction that appends them. No foreign key (see the module docstring); rows of a
-- deleted partition are removed by the drainers' poll.
CREATE TABLE IF NOT EXISTS oncelog.outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition_id bigint  NOT NULL,
    ts           bigint  NOT NULL,
    key          bytea,
    value        bytea,
    headers      jsonb   NOT NULL DEFAULT '[]'::jsonb,
    size         integer NOT NULL CHECK (size >= 0)
);
CREATE INDEX IF NOT EXISTS outbox_partition ON oncelog.outbox (partition_id, id);
REVOKE ALL ON oncelog.outbox FROM PUBLIC;

-- PostgreSQL role (session_user) -> Kafka principal; a role with no row is User:<role>
CREATE TABLE IF NOT EXISTS oncelog.role_principal (
    role      name PRIMARY KEY,
    principal text NOT NULL CHECK (principal ~ '^[^:]+:.+$')
);
REVOKE ALL ON oncelog.role_principal FROM PUBLIC;

-- (a * b) mod 2^32 for a, b in [0, 2^32), without overflowing bigint
CREATE OR REPLACE FUNCTION oncelog.mul32(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ((((a >> 16) * b) & 65535) << 16) + (a & 65535) * b & 4294967295
$$;

-- Kafka's murmur2 (the Java client's default partitioner for a keyed record), as a signed int
CREATE OR REPLACE FUNCTION oncelog.murmur2(data bytea) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    len int := octet_length(data);
    m bigint := 1540483477;  -- 0x5bd1e995
    h bigint := (2538058380 # len) & 4294967295;  -- seed 0x9747b28c ^ length
    k bigint;
    i int := 0;
    tail int;
BEGIN
    WHILE i + 4 <= len LOOP
        k := get_byte(data, i)::bigint | (get_byte(data, i + 1)::bigint << 8)
             | (get_byte(data, i + 2)::bigint << 16) | (get_byte(data, i + 3)::bigint << 24);
        k := oncelog.mul32(k, m);
        k := k # (k >> 24);
        k := oncelog.mul32(k, m);
        h := oncelog.mul32(h, m) # k;
        i := i + 4;
    END LOOP;
    tail := len - i;
    IF tail = 3 THEN h := h # (get_byte(data, i + 2)::bigint << 16); END IF;
    IF tail >= 2 THEN h := h # (get_byte(data, i + 1)::bigint << 8); END IF;
    IF tail >= 1 THEN h := oncelog.mul32(h # get_byte(data, i)::bigint, m); END IF;
    h := h # (h >> 13);
    h := oncelog.mul32(h, m);
    h := h # (h >> 15);
    RETURN (CASE WHEN h >= 2147483648 THEN h - 4294967296 ELSE h END)::int;
END
$$;

-- May the caller's principal Write to the topic? Kafka's rules (see outbox_schema.py)
CREATE OR REPLACE FUNCTION oncelog.may_write(p_principal text, p_host text, p_topic text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$  -- PL/pgSQL: its plan is cached per session (a SQL function's is not)
DECLARE
    denied boolean;
    allowed boolean;
BEGIN
    SELECT bool_or(permission = 2), bool_or(permission = 3) INTO denied, allowed FROM oncelog_acl
    WHERE resource_type = 2
      AND ((pattern_type = 3 AND (name = p_topic OR name = '*'))
           OR (pattern_type = 4 AND starts_with(p_topic, name)))
      AND (principal = p_principal OR principal = 'User:*')
      AND (host = '*' OR host = p_host)
      AND operation IN (2, 4);
    RETURN NOT coalesce(denied, false) AND coalesce(allowed, false);
END
$$;

CREATE OR REPLACE FUNCTION oncelog.send(topic text, key bytea, value bytea, headers jsonb DEFAULT NULL,
                                        partition int DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    t record;
    pid bigint;
    p int := partition;
    who text;
    limit_bytes bigint;
    hdrs jsonb := '[]'::jsonb;
    h jsonb;
    hsize bigint := 0;
    total bigint;
BEGIN
    IF topic IS NULL THEN
        RAISE EXCEPTION 'oncelog.send: topic must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO t FROM oncelog_topic WHERE name = topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'oncelog.send: UNKNOWN_TOPIC_OR_PARTITION: topic "%" does not exist', topic
            USING ERRCODE = '42704';
    END IF;
    IF topic IN ('__consumer_offsets', '__transaction_state', '__share_group_state') THEN
        RAISE EXCEPTION 'oncelog.send: topic "%" is internal', topic USING ERRCODE = '42501';
    END IF;
    who := coalesce((SELECT r.principal FROM oncelog.role_principal r WHERE r.role = session_user),
                    'User:' || session_user);
    IF NOT oncelog.may_write(who, coalesce(host(inet_client_addr()), ''), topic) THEN
        RAISE EXCEPTION 'oncelog.send: TOPIC_AUTHORIZATION_FAILED: % (role %) may not Write to topic "%"',
            who, session_user, topic USING ERRCODE = '42501';
    END IF;
    IF p IS NOT NULL AND (p < 0 OR p >= t.partitions) THEN
        RAISE EXCEPTION 'oncelog.send: partition % out of range: topic "%" has % partition(s)', p, topic, t.partitions
            USING ERRCODE = '22003';
    END IF;
    IF key IS NULL AND 'compact' = ANY(string_to_array(coalesce(t.configs->>'cleanup.policy', 'delete'), ',')) THEN
        RAISE EXCEPTION 'oncelog.send: compacted topic "%" cannot accept a record without key', topic
            USING ERRCODE = '22004';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) = 'object' THEN
        SELECT coalesce(jsonb_agg(jsonb_build_array(e.k, e.v)), '[]'::jsonb) INTO hdrs FROM jsonb_each(headers) e(k, v);
    ELSIF headers IS NOT NULL AND jsonb_typeof(headers) = 'array' THEN
        hdrs := headers;
    ELSIF headers IS NOT NULL AND jsonb_typeof(headers) <> 'null' THEN
        RAISE EXCEPTION 'oncelog.send: headers must be a JSON object or an array of [name, value] pairs'
            USING ERRCODE = '22023';
    END IF;
    FOR h IN SELECT x FROM jsonb_array_elements(hdrs) a(x) LOOP
        IF jsonb_typeof(h) <> 'array' OR jsonb_array_length(h) <> 2 OR jsonb_typeof(h->0) <> 'string'
           OR jsonb_typeof(h->1) NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'oncelog.send: header % is not a [name, value] pair of a string and a string or null', h
                USING ERRCODE = '22023';
        END IF;
        hsize := hsize + 10 + octet_length(convert_to(h->>0, 'UTF8')) + coalesce(octet_length(convert_to(h->>1, 'UTF8')), 0);
    END LOOP;
    limit_bytes := coalesce((t.configs->>'max.message.bytes')::bigint,
                            (SELECT (c.configs->>'message.max.bytes')::bigint FROM oncelog_broker_config c
                             WHERE c.resource = ''), 1048588);
    total := {BATCH_OVERHEAD} + {RECORD_OVERHEAD} + coalesce(octet_length(key), 0) + coalesce(octet_length(value), 0) + hsize;
    IF total > limit_bytes THEN
        RAISE EXCEPTION 'oncelog.send: MESSAGE_TOO_LARGE: a record of % bytes as a batch exceeds % bytes of topic "%"',
            total, limit_bytes, topic USING ERRCODE = '54000';
    END IF;
    IF p IS NULL THEN
        IF key IS NOT NULL THEN
            p := (oncelog.murmur2(key) & 2147483647) % t.partitions;
        ELSE  -- sticky per transaction: every keyless record of one transaction on one partition
            p := (pg_current_xact_id()::text::numeric % t.partitions)::int;
        END IF;
    END IF;
    SELECT id INTO pid FROM oncelog_partition WHERE oncelog_partition.topic = t.name AND oncelog_partition.partition = p;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'oncelog.send: UNKNOWN_TOPIC_OR_PARTITION: %-%', topic, p USING ERRCODE = '42704';
    END IF;
    INSERT INTO oncelog.outbox (partition_id, ts, key, value, headers, size)
    VALUES (pid, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, key, value, hdrs, total - {BATCH_OVERHEAD});
    PERFORM pg_notify('{OUTBOX_CHANNEL}', pid::text);
    RETURN p;
END
$$;
REVOKE ALL ON FUNCTION {SEND_SIGNATURE} FROM PUBLIC;
REVOKE ALL ON FUNCTION oncelog.may_write(text, text, text) FROM PUBLIC;
DO $do$ BEGIN
    EXECUTE format('ALTER FUNCTION {SEND_SIGNATURE} SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION oncelog.may_write(text, text, text) SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END $do$;
"""
