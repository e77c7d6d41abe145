"""Kafka records inside your own PostgreSQL transaction (issue 31, docs/DATABASE.md).

``send(conn, topic, value, key=None, headers=None, partition=None)`` calls ``oncelog.send``
(cluster/outbox_schema.py) on a psycopg 3 connection to the cluster store's database, inside
whatever transaction ``conn`` is in: the record becomes readable by Kafka consumers iff that
transaction commits, exactly once, after the records sent before it in the same transaction.
Nothing here commits. psycopg is the ``cluster`` extra; it is imported only when called.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["commit_offsets", "group_metadata", "send", "send_many"]

Headers = Mapping[str, "str | None"] | Sequence[tuple[str, "str | None"]]


def _bytes(x: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes, str or None, not {type(x).__name__}")


def send(conn: Any, topic: str, value: bytes | str | None, key: bytes | str | None = None,
         headers: Headers | None = None, partition: int | None = None) -> int:
    """Send one record to ``topic`` in ``conn``'s current transaction (a psycopg 3 connection;
    in autocommit mode the call is its own transaction). ``key``/``value``: bytes, or str
    (sent as UTF-8); ``headers``: a mapping or a sequence of ``(name, value)`` pairs, values str
    (UTF-8) or None; ``partition``: None picks it as Kafka's default partitioner does for a key
    (murmur2), and one partition per transaction for keyless records. Returns the partition.
    Raises the psycopg error of a refusal (unknown topic, partition out of range, record too
    large, no Write ACL, ...): the transaction is then aborted, as any failed statement does."""
    row = conn.execute(_SEND, _params(topic, value, key, headers, partition)).fetchone()
    return int(row[0])


def send_many(conn: Any, topic: str, records: Sequence[tuple]) -> list[int]:
    """``send`` for many records in one pipeline (psycopg's ``executemany``: one round trip
    for all, each still one ``oncelog.send`` call, in order). ``records``: tuples ``(value,)``,
    ``(value, key)``, ``(value, key, headers)`` or ``(value, key, headers, partition)``.
    Returns the partitions, in order. A refusal raises and aborts the transaction, as ``send``."""
    params = [_params(topic, *r) for r in records]
    if not params:
        return []
    out: list[int] = []
    with conn.cursor() as cur:
        cur.executemany(_SEND, params, returning=True)
        while True:
            out.append(int(cur.fetchone()[0]))
            if not cur.nextset():
                break
    return out


_SEND = "SELECT oncelog.send(%s, %s, %s, %s, %s)"


def _params(topic: str, value: bytes | str | None, key: bytes | str | None = None, headers: Headers | None = None,
            partition: int | None = None) -> tuple:
    from psycopg.types.json import Jsonb

    if headers is None:
        hdrs = None
    elif isinstance(headers, Mapping):
        hdrs = Jsonb(dict(headers))
    else:
        hdrs = Jsonb([[str(k), v] for k, v in headers])
    return (topic, _bytes(key, "key"), _bytes(value, "value"), hdrs, partition)


# -- the inbox: a consumer group's offsets committed in your transaction --------------------------

_COMMIT = "SELECT oncelog.commit_offsets(%s, %s, %s, %s, %s, %s, %s, %s)"


def commit_offsets(conn: Any, group_id: str, offsets: Any, member_id: str = "", generation: int = -1,
                   metadata: str | None = None) -> None:
    """Commit ``group_id``'s offsets in ``conn``'s current transaction (a psycopg 3 connection):
    they become the group's committed offsets (OffsetFetch answers them) iff that transaction
    commits. ``offsets``: a mapping ``{(topic, partition): next_offset}``, or an iterable of
    ``(topic, partition, next_offset)`` tuples or of objects with ``topic``, ``partition`` and
    ``offset`` attributes (confluent-kafka's ``TopicPartition``); ``next_offset`` is the offset
    of the next record to read (the last processed one + 1), as Kafka commits. ``member_id`` and
    ``generation`` (the classic generation, or the member epoch of a KIP-848 consumer group):
    the consumer's, from ``group_metadata(consumer)``; ``""``/``-1`` for a group without members
    (a consumer that assigns partitions itself). Offsets are committed in (topic, partition)
    order, one ``oncelog.commit_offsets`` call each in one pipeline. A refusal (a fenced
    member: ILLEGAL_GENERATION, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS;
    no Read ACL; bad input) raises the psycopg error, whose ``diag.message_detail`` is the Kafka
    error name, and aborts the transaction."""
    items: list[tuple[str, int, int]] = []
    if isinstance(offsets, Mapping):
        items = [(str(t), int(p), int(o)) for (t, p), o in offsets.items()]
    else:
        for x in offsets:
            if isinstance(x, tuple):
                t, p, o = x
            else:
                t, p, o = x.topic, x.partition, x.offset
            items.append((str(t), int(p), int(o)))
    params = [(group_id, member_id, generation, t, p, o, metadata, -1) for t, p, o in sorted(items)]
    if params:
        with conn.cursor() as cur:
            cur.executemany(_COMMIT, params)


def group_metadata(consumer: Any) -> tuple[str, str, int]:
    """``(group id, member id, generation or member epoch)`` of a consumer's current membership,
    for ``commit_offsets``: a confluent-kafka ``Consumer`` (from its
    ``consumer_group_metadata()``, librdkafka's serialized form) or a kafka-python
    ``KafkaConsumer`` (its coordinator's generation; ``("", "", -1)`` parts while it is not a
    stable member)."""
    import sys

    if hasattr(consumer, "consumer_group_metadata"):
        raw = bytes(consumer.consumer_group_metadata())
        magic = b"CGMDv2:"
        if not raw.startswith(magic):
            raise ValueError(f"unknown consumer group metadata format {raw[:8]!r}")
        generation = int.from_bytes(raw[7:11], sys.byteorder, signed=True)
        group_id, member_id = raw[11:].split(b"\0")[:2]
        return group_id.decode("utf-8"), member_id.decode("utf-8"), generation
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        raise TypeError(f"not a confluent-kafka or kafka-python consumer: {type(consumer).__name__}")
    gen = coordinator.generation_if_stable()
    group_id = consumer.config.get("group_id") or ""
    if gen is None:
        return group_id, "", -1
    return group_id, gen.member_id, gen.generation_id
