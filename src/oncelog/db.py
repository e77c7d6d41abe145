"""Kafka records inside your own PostgreSQL transaction (issue 31, docs/DATABASE.md).

``send(conn, topic, value, key=None, headers=None, partition=None)`` calls ``oncelog.send``
(cluster/outbox_schema.py) on a psycopg 3 connection to the cluster store's database, inside
whatever transaction ``conn`` is in: the record becomes readable by Kafka consumers iff that
transaction commits, exactly once, after the records sent before it in the same transaction.
Nothing here commits. psycopg is the ``cluster`` extra; it is imported only when called.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["send"]

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
    from psycopg.types.json import Jsonb

    if headers is not None and not isinstance(headers, Mapping):
        headers = [[str(k), v] for k, v in headers]
    row = conn.execute("SELECT oncelog.send(%s, %s, %s, %s, %s)",
                       (topic, _bytes(key, "key"), _bytes(value, "value"),
                        None if headers is None else Jsonb(headers if not isinstance(headers, Mapping) else dict(headers)),
                        partition)).fetchone()
    return int(row[0])
