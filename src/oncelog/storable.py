"""Which client strings a store can hold (issue 26 row 11): the one check, used wherever a
client's string is kept as text (ACL bindings, config values, SCRAM user names).

PostgreSQL's ``text`` and ``jsonb`` refuse the NUL character, and UTF-8 cannot encode a lone
UTF-16 surrogate (Python strings can hold one: argv decoded with surrogateescape). Such a string
reaching the cluster store raised psycopg's DataError inside a store transaction: a ``bug:`` line,
and empty results or KAFKA_STORAGE_ERROR for the whole request. Kafka keeps these strings in its
own metadata records, where any Java string fits; oncelog refuses them in both modes alike (an
ACL or config accepted by an embedded broker must also be accepted in cluster mode), each
caller with the per-resource error code of its request: INVALID_REQUEST for an ACL binding,
INVALID_CONFIG for a config value, UNACCEPTABLE_CREDENTIAL for a SCRAM user name (such a user
could never log in anyway: SCRAM's saslname excludes NUL, RFC 5802, and PLAIN uses NUL as its
separator). Group ids and transactional ids are kept inside records, as bytes, and need no
check. Wire strings
are decoded strictly (protocol/framing.py), so over the protocol only NUL can arrive.
"""

from __future__ import annotations

__all__ = ["unstorable"]


def unstorable(value: str) -> str | None:
    """Why ``value`` cannot be stored as text (a short reason, never the value itself, which
    may be huge), or None when it can."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None
