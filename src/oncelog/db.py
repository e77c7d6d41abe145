"""Kafka records inside your own PostgreSQL transaction (issue 31, docs/DATABASE.md).

``send(conn, topic, value, key=None, headers=None, partition=None)`` calls ``oncelog.send``
(cluster/outbox_schema.py) on a psycopg 3 connection to the cluster store's database, inside
whatever transaction ``conn`` is in: the record becomes readable by Kafka consumers iff that
transaction commits, exactly once, after the records sent before it in the same transaction.
Nothing here commits. psycopg is the ``cluster`` extra; it is imported only when called.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["send", "send_many"]

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
