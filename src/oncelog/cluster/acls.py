"""The ACLs of a cluster (issue 18) in the PostgreSQL store: every broker enforces the same set.

``StoreAcls.apply`` adds and removes bindings in one transaction that also increments
``oncelog_acl_version`` and sends ``NOTIFY oncelog_metadata`` (cluster/notify.py), then returns
the whole stored set, so the broker that served CreateAcls / DeleteAcls enforces the change
before it answers. The other brokers reload on the notification (ClusterMember polls at once)
or at their next metadata poll (every half second): ``changed()`` compares the version, so an
unchanged set costs one one-row read per poll.

Thread-safety: one ``StoreConnection``; callers serialize (broker/acls.AclService's lock).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from oncelog.acl.model import AclBinding
from oncelog.cluster.connection import StoreConnection

__all__ = ["StoreAcls"]

_COLS = "resource_type, name, pattern_type, principal, host, operation, permission"


class StoreAcls:
    def __init__(self, connect: Callable[[], Any], what: str = "acls") -> None:
        self._conn = StoreConnection(connect, what)
        self._version = -1

    def _version_now(self) -> int:
        rows = self._conn.query("SELECT version FROM oncelog_acl_version")
        return rows[0][0] if rows else 0

    def load(self) -> list[AclBinding]:
        """Every stored binding (and remember the version read with them); raises StoreUnavailable."""
        with self._conn.transaction() as conn:
            row = conn.execute("SELECT version FROM oncelog_acl_version").fetchone()
            rows = conn.execute(f"SELECT {_COLS} FROM oncelog_acl").fetchall()
        self._version = row[0] if row else 0
        return [AclBinding.from_json(list(r)) for r in rows]

    def changed(self) -> bool:
        """Did another broker change the ACLs since the last ``load``?"""
        return self._version_now() != self._version

    def apply(self, current: frozenset[AclBinding], added: Iterable[AclBinding],
              removed: Iterable[AclBinding]) -> frozenset[AclBinding]:
        with self._conn.transaction() as conn:
            for b in added:
                conn.execute(f"INSERT INTO oncelog_acl ({_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                             "ON CONFLICT DO NOTHING", b.to_json())
            for b in removed:
                conn.execute(f"DELETE FROM oncelog_acl WHERE ({_COLS}) = (%s, %s, %s, %s, %s, %s, %s)", b.to_json())
            conn.execute("INSERT INTO oncelog_acl_version (one, version) VALUES (true, 1) "
                         "ON CONFLICT (one) DO UPDATE SET version = oncelog_acl_version.version + 1")
            conn.execute("SELECT pg_notify('oncelog_metadata', 'acls')")
        return frozenset(self.load())

    def close(self) -> None:
        self._conn.close()
